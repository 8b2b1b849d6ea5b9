"""refund-bot's search attributes on a namespace that lacks them: added where the server allows it,
one line where it refuses.

    a dev server someone already runs, started without them -> `refund-bot run` adds them -> refund
    an embedded database an older release made (RefundBotVersion only) -> added -> refund
    a server that refuses the add -> `run` and `worker`: one line, every name and both commands
    a Worker that stops before polling -> its own last line, through the supervisor
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent.settings import AgentSettings, TemporalSettings
from agent.visibility import SEARCH_ATTRIBUTES
from harness import free_port
from harness.cli_process import fresh_env
from harness.codec import TEST_CODEC_ENV
from harness.conditions import wait_for
from harness.conversation import LocalConversation
from refund_bot.app import running_stack
from refund_bot.wiring import local_thread_store
from worker.server import DB_FILENAME, temporal_answers, temporal_cli_path
from worker.supervisor import WorkerStartError, WorkerSupervisor

NAMES = {key.name for key in SEARCH_ATTRIBUTES}


async def _custom_attributes(client: Client) -> set[str]:
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    return set(listed.custom_attributes)


async def _refund_1234(temporal: TemporalSettings, data_dir: Path) -> None:
    """`refund-bot run`'s stack on `temporal`: the seeded customer's refund, start to end."""
    settings = AgentSettings(_env_file=None, data_dir=data_dir)
    env = {"DATA_DIR": str(data_dir), "SLACK_BOT_TOKEN": "", "DISCORD_TOKEN": ""}
    async with running_stack(temporal, settings, worker_env=env) as stack:
        assert await _custom_attributes(stack.client) >= NAMES
        conv = LocalConversation(stack.client, local_thread_store(settings), temporal.task_queue)
        handle = await conv.open("please refund order 1234")
        assert (await conv.next_bot_message()).text == "Was the package opened?"
        await conv.reply("Yes")
        assert (await conv.next_bot_message()).text == "What was damaged?"
        await conv.reply("Split seam")
        assert (await asyncio.wait_for(handle.result(), 90)).status == "refunded"


async def test_run_adds_them_to_a_dev_server_started_without_them(tmp_path: Path) -> None:
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=str(temporal_cli_path()))
    async with env:
        assert not NAMES & await _custom_attributes(env.client)
        address = env.client.service_client.config.target_host
        temporal = TemporalSettings(_env_file=None, address=address, ui_port=free_port())
        await _refund_1234(temporal, tmp_path)  # the stack reuses the server that answers


async def test_run_adds_them_to_an_older_releases_database(tmp_path: Path) -> None:
    # An older release's embedded server made this database with RefundBotVersion alone.
    address = f"127.0.0.1:{free_port()}"
    host, _, port = address.rpartition(":")
    old = await asyncio.create_subprocess_exec(
        str(temporal_cli_path()), "server", "start-dev", "--ip", host, "--port", port,
        "--ui-port", str(free_port()), "--db-filename", str(tmp_path / DB_FILENAME),
        "--search-attribute", "RefundBotVersion=Keyword", "--log-level", "error",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:

        async def answers() -> bool:
            assert old.returncode is None, "the older server exited"
            return await temporal_answers(address, 0.5)

        await wait_for(answers, timeout=60, interval=0.2, what="the older server to answer")
        assert NAMES & await _custom_attributes(await Client.connect(address)) == {
            "RefundBotVersion"
        }
    finally:
        old.terminate()
        await old.wait()
    temporal = TemporalSettings(_env_file=None, address=address, ui_port=free_port())
    await _refund_1234(temporal, tmp_path)  # its own embedded server, on that database


async def _refused_line(command: str, address: str, tmp: Path) -> str:
    env = fresh_env(tmp / command, TEMPORAL_ADDRESS=address, **TEST_CODEC_ENV)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "refund_bot", command,
        env=env, cwd=tmp, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    stderr = err.decode()
    assert proc.returncode == 1, (out.decode(), stderr)
    assert "Traceback" not in stderr, stderr
    (line,) = [line for line in stderr.splitlines() if line.startswith("refund-bot: ")]
    return line


async def test_a_server_that_refuses_the_add_gets_one_line_from_every_command(
    tmp_path: Path,
) -> None:
    # A real refusal: this server's SQLite visibility holds at most three Bool attributes, and
    # another application took them.
    others = [arg for i in (1, 2, 3) for arg in ("--search-attribute", f"OtherFlag{i}=Bool")]
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli_path()), dev_server_extra_args=others
    )
    async with env:
        address = env.client.service_client.config.target_host
        for command in ("run", "demo", "worker", "conversations"):
            line = await _refused_line(command, address, tmp_path)
            assert "cannot have more than 3 search attribute of type Bool" in line, line
            assert "temporal operator search-attribute create --namespace default" in line
            assert "tcld namespace search-attributes add -n default" in line
            for key in SEARCH_ATTRIBUTES:
                assert f"--name {key.name} --type " in line, line
                assert f"--sa {key.name}=" in line, line
            assert (
                "RefundBotAmountCents (Int)" in line
                and "--sa RefundBotWaitingSince=Datetime" in line
            )
        assert not NAMES & await _custom_attributes(env.client)  # nothing half-added


async def test_a_worker_that_stops_before_polling_is_heard_in_one_line(tmp_path: Path) -> None:
    says = "namespace 'x' lacks refund-bot's search attributes"
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=str(temporal_cli_path()))
    async with env:
        supervisor = WorkerSupervisor(
            TemporalSettings(_env_file=None, address=env.client.service_client.config.target_host),
            client=env.client,
            command=[
                sys.executable,
                "-c",
                "import sys; sys.exit(sys.argv[1])",
                f"refund-bot: {says}",
            ],
            log_path=tmp_path / "worker.log",
        )
        try:
            await supervisor.start()
        except WorkerStartError as err:
            assert str(err).endswith(f"before polling: refund-bot: {says}"), err
        else:
            raise AssertionError("the supervisor started a Worker that exited")
        finally:
            await supervisor.stop()

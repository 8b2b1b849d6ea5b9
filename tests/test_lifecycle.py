"""Every process refund-bot starts stops with it: real `refund-bot` processes, signalled and killed.

The whole process tree, walked in /proc before the signal, is checked, not only the process that
was signalled. Each run has its own data directory and its own free ports (Temporal, UI, Slack).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from agent.models import Actor, ThreadRef
from agent.settings import TemporalSettings
from agent.stores.sqlite import SqliteDatabase
from bot.conversations import InboundMessage, Routed
from bot.draining_router import DrainingRouter
from bot.ids import workflow_id_for
from bot.inbox import Inbox
from harness import free_port
from harness.cli_process import RefundBotProcess, fresh_env
from harness.codec import TEST_CODEC_ENV
from harness.conditions import wait_for
from harness.fakes.slack_api import FakeSlackApi, SlackSender, signed_headers
from worker.control import worker_identity
from worker.lifecycle import alive, record_server, settled_command_line, stop_left_behind
from worker.pollers import worker_is_polling
from worker.server import temporal_answers
from worker.supervisor import WorkerSupervisor

SECRET = "lifecycle-signing-secret"
CHANNEL = "C0SUPPORT"
# The line `refund-bot run` prints once everything is up.
STATUS = (
    r"status: Temporal (?P<address>\S+) \((?P<origin>[^)]*)\) \| "
    r"Worker pid (?P<worker>\d+) polling '[^']+', (?:standby pid (?P<standby>\d+)|no standby) \| "
    r"(?P<platforms>[^|]*) \| inbox (?P<inbox>\d+)"
)
EMBEDDED = r"embedded, pid (\d+)"
DUMMY_WORKER = [sys.executable, "-m", "tests.support.dummy_worker"]


@asynccontextmanager
async def refund_bot(
    args: list[str], env: dict[str, str], cwd: Path
) -> AsyncIterator[RefundBotProcess]:
    bot = await RefundBotProcess.start(args, env, cwd)
    try:
        yield bot
    finally:
        await bot.close()


def slack_env(slack: FakeSlackApi, data_dir: Path) -> dict[str, str]:
    """Slack in HTTP mode against the fake Web API, on a free port."""
    return fresh_env(
        data_dir,
        SLACK_BOT_TOKEN=slack.token,
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_SUPPORT_CHANNEL=CHANNEL,
        SLACK_PORT=str(free_port()),
        SLACK_API_URL=slack.url,
        # The Slack customer is the demo customer: asked about order 1234, not told it is not
        # theirs.
        DEMO_CUSTOMER_FOR_NEW_USERS="cus_nyghtowl",
    )


def none_alive(pids: set[int]) -> Callable[[], bool]:
    return lambda: not any(alive(pid) for pid in pids)


async def up(bot: RefundBotProcess) -> tuple[re.Match[str], int, int]:
    """Wait for the status line; returns it, the embedded server's pid and the Worker's pid, both
    checked to be in the process's tree."""
    status = await bot.expect(STATUS)
    server = re.fullmatch(EMBEDDED, status["origin"])
    assert server is not None, status[0]
    server_pid, worker_pid = int(server[1]), int(status["worker"])
    assert {server_pid, worker_pid} <= bot.tree()
    return status, server_pid, worker_pid


# ------------------------------------------------------------------------------------------------
# `refund-bot run`: stopped by a signal, killed, restarted over what a killed run left
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name
)
async def test_a_stop_signal_stops_the_whole_tree_and_exits_0(
    sig: signal.Signals, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    async with (
        FakeSlackApi() as slack,
        refund_bot(["run"], slack_env(slack, data), tmp_path) as bot,
    ):
        status, _, _ = await up(bot)
        assert status["platforms"] == "slack connected"
        assert (data / "temporal-server.pid").exists()
        tree = bot.tree()

        started = time.monotonic()
        bot.send(sig)
        assert await bot.exit_code(timeout=10) == 0, bot.output
        assert time.monotonic() - started < 10
        # Stopped with it, not after it: nothing of its tree outlived the exit.
        assert {pid for pid in tree if alive(pid)} == set()
    assert f"{sig.name}: stopping" in bot.stderr
    assert "Traceback" not in bot.output
    assert not (data / "temporal-server.pid").exists()


async def test_its_worker_and_server_exit_when_run_is_sigkilled(tmp_path: Path) -> None:
    async with FakeSlackApi() as slack:
        env = slack_env(slack, tmp_path / "data")
        async with refund_bot(["run"], env, tmp_path) as bot:
            _, server, worker = await up(bot)
            tree = bot.tree()
            bot.send(signal.SIGKILL)
            await wait_for(
                none_alive(tree), timeout=5, what=f"the Worker {worker} and server {server} to exit"
            )


async def test_a_server_left_behind_by_a_killed_run_is_recognised_and_stopped(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    env = fresh_env(data)
    # A run that started its server untied to itself (as before this module), then was SIGKILLed.
    leaver = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "tests.support.orphan_server", str(data)],
        *[env["TEMPORAL_ADDRESS"], env["TEMPORAL_UI_PORT"]],
        stdout=asyncio.subprocess.PIPE,
    )
    assert leaver.stdout is not None
    orphan = int((await asyncio.wait_for(leaver.stdout.readline(), 60)).split()[-1])
    leaver.kill()
    await leaver.wait()
    try:
        assert alive(orphan) and await temporal_answers(env["TEMPORAL_ADDRESS"])
        async with refund_bot(["run"], env, tmp_path) as bot:
            await bot.expect(
                rf"Stopping the Temporal server \(pid {orphan}\) that an earlier refund-bot run "
                rf"\(pid {leaver.pid}\) left behind for {re.escape(str(data))}"
            )
            status, server, _ = await up(bot)
            assert server != orphan and not alive(orphan)
            assert status["platforms"] == "no chat platform"
            assert bot.output.count("left behind") == 1
            bot.send(signal.SIGTERM)
            assert await bot.exit_code(timeout=10) == 0, bot.output
    finally:
        if alive(orphan):
            os.kill(orphan, signal.SIGKILL)


async def test_a_pid_file_is_believed_only_for_the_process_it_names(tmp_path: Path) -> None:
    pid_file = tmp_path / "temporal-server.pid"
    sleeper = await asyncio.create_subprocess_exec("sleep", "600")
    argv = ["sleep", "600"]
    try:
        # The recorded pid now runs another program (a reused pid): nothing is stopped.
        record_server(pid_file, sleeper.pid, ["temporal", "server", "start-dev"])
        assert await stop_left_behind(pid_file, 5) is None
        assert alive(sleeper.pid) and not pid_file.exists()

        # The recorded program, and the refund-bot that started it (this process) still runs.
        record_server(pid_file, sleeper.pid, argv)
        shared = await stop_left_behind(pid_file, 5)
        assert shared is not None and shared.owner_pid == os.getpid()
        assert alive(sleeper.pid) and pid_file.exists()

        # The process that recorded it is gone: left behind, so stopped.
        writer = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from worker.lifecycle import record_server; "
            "record_server(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])",
            str(pid_file),
            str(sleeper.pid),
            *argv,
        )
        assert await writer.wait() == 0
        assert await stop_left_behind(pid_file, 5) is None
        assert not alive(sleeper.pid) and not pid_file.exists()

        # A server that is simply gone: a stale file, removed.
        record_server(pid_file, sleeper.pid, argv)
        assert await stop_left_behind(pid_file, 5) is None
        assert not pid_file.exists()
    finally:
        if sleeper.returncode is None:
            sleeper.kill()
        await sleeper.wait()


# ------------------------------------------------------------------------------------------------
# No terminal, and Workers of other processes
# ------------------------------------------------------------------------------------------------


async def test_a_process_read_the_moment_it_is_spawned_shows_its_own_command_line() -> None:
    """A spawn returns while the child is still inside execve, its command line empty for a moment
    (about 1 in 300 on a busy machine): read then, a just-started server would pass for another
    program, and its pid file be thrown away. Thousands of spawns, each read at once."""
    argv = ["sleep", "600"]
    for _ in range(2000):
        proc = await asyncio.create_subprocess_exec(*argv)
        try:
            assert await settled_command_line(proc.pid) == argv
        finally:
            proc.kill()
            await proc.wait()
    # A process that has no command line to show is answered at once: a kernel thread, none.
    assert await asyncio.wait_for(settled_command_line(2), 0.5) is None
    assert await asyncio.wait_for(settled_command_line(proc.pid), 0.5) is None


async def test_without_a_terminal_the_local_channel_stays_closed_and_slack_serves(
    tmp_path: Path,
) -> None:
    async with FakeSlackApi() as slack:
        env = slack_env(slack, tmp_path / "data")
        async with refund_bot(["run", "--local"], env, tmp_path) as bot:
            await bot.expect(r"The terminal channel is not opened: stdin is not a terminal\.\n")
            status, _, _ = await up(bot)
            assert status["platforms"] == "slack connected"

            delivery = SlackSender(slack).post(CHANNEL, "please refund order 1234")
            url = f"http://127.0.0.1:{env['SLACK_PORT']}/slack/events"
            async with aiohttp.ClientSession() as http:
                headers = signed_headers(SECRET, delivery)
                async with http.post(url, data=delivery.body, headers=headers) as resp:
                    assert resp.status == 200
            root = delivery.payload["event"]["ts"]

            def asked() -> list[dict]:
                return [m for m in slack.thread(CHANNEL, root) if m.get("bot_id")]

            (question,) = await wait_for(asked, timeout=60, what="the agent's question in Slack")
            assert question["text"] == "Was the package opened?"
            bot.send(signal.SIGTERM)
            assert await bot.exit_code(timeout=10) == 0, bot.output
    assert "Traceback" not in bot.output
    assert bot.output.count("terminal channel") == 1


async def test_with_no_terminal_and_no_platform_it_serves_temporal_and_the_worker(
    tmp_path: Path,
) -> None:
    async with refund_bot(["run"], fresh_env(tmp_path / "data"), tmp_path) as bot:
        await bot.expect(
            r"The terminal channel is not opened \(stdin is not a terminal\) and no chat platform "
            r"is configured: running Temporal and the Worker only, as a service, until SIGTERM\."
        )
        # Serving, not hung: Temporal itself reports the Worker polling (the status line asks it).
        status, _, _ = await up(bot)
        assert status["platforms"] == "no chat platform" and status["inbox"] == "0"
        bot.send(signal.SIGTERM)
        assert await bot.exit_code(timeout=10) == 0, bot.output
    assert "Traceback" not in bot.output


async def test_a_worker_of_another_process_on_the_task_queue_is_reported(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    address = temporal_env.client.service_client.config.target_host
    queue = f"lifecycle-{uuid.uuid4().hex[:8]}"
    env = fresh_env(
        tmp_path / "data",
        TEMPORAL_ADDRESS=address,
        TEMPORAL_TASK_QUEUE=queue,
        TEMPORAL_CONTROL_TASK_QUEUE=f"{queue}-control",
    )
    other = await asyncio.create_subprocess_exec(*DUMMY_WORKER, env=env)
    try:

        async def other_polls() -> bool:
            identity = worker_identity(other.pid)
            return await worker_is_polling(temporal_env.client, "default", queue, identity)

        await wait_for(other_polls, timeout=30, what="the other process's Worker to poll")
        async with refund_bot(["run"], env, tmp_path) as bot:
            await bot.expect(
                rf"Using the Temporal server already answering at {re.escape(address)} \(reused: "
                r"not started by refund-bot for this data directory\); refund-bot will not stop it"
            )
            await bot.expect(
                rf"Task queue '{queue}' already has 1 Worker\(s\) of another process polling: "
                rf"pid {other.pid} on {re.escape(socket.gethostname())} "
            )
            status = await bot.expect(STATUS)
            assert status["origin"] == "reused: not started by refund-bot for this data directory"
            assert "Using the Temporal server" in bot.stdout  # said, not warned: it is no fault
            assert int(status["worker"]) != other.pid
            bot.send(signal.SIGTERM)
            assert await bot.exit_code(timeout=10) == 0, bot.output
        # Neither the other Worker nor the server refund-bot did not start was stopped.
        assert alive(other.pid) and await temporal_answers(address)
    finally:
        with contextlib.suppress(ProcessLookupError):
            other.terminate()
        await other.wait()


# ------------------------------------------------------------------------------------------------
# `refund-bot worker` and `refund-bot demo` stop the same way
# ------------------------------------------------------------------------------------------------


def _worker_env(temporal_env: WorkflowEnvironment, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """(task queue, environment) of a `refund-bot worker` on the test server, on a queue of its
    own. A Worker on a shared server encrypts with the deployment's keys (it never makes one)."""
    queue = f"lifecycle-{uuid.uuid4().hex[:8]}"
    address = temporal_env.client.service_client.config.target_host
    env = fresh_env(
        tmp_path / "data", TEMPORAL_ADDRESS=address, TEMPORAL_TASK_QUEUE=queue, **TEST_CODEC_ENV
    )
    return queue, env


async def test_refund_bot_worker_stops_gracefully_on_sighup(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    queue, env = _worker_env(temporal_env, tmp_path)
    async with refund_bot(["worker"], env, tmp_path) as worker:

        async def polls() -> bool:
            identity = worker_identity(worker.pid)
            return await worker_is_polling(temporal_env.client, "default", queue, identity)

        await wait_for(polls, timeout=60, what="refund-bot worker to poll")
        worker.send(signal.SIGHUP)
        assert await worker.exit_code(timeout=10) == 0, worker.output
    assert "SIGHUP: stopping" in worker.stderr and "Traceback" not in worker.output


async def test_refund_bot_demo_stops_gracefully_on_sigint(tmp_path: Path) -> None:
    async with refund_bot(["demo"], fresh_env(tmp_path / "data"), tmp_path) as demo:
        await demo.expect(r"Worker pid \d+ is polling")

        # The embedded server, the Worker and its warm standby (started once the Worker polls).
        def three() -> set[int] | None:
            found = demo.tree()
            return found if len(found) == 3 else None

        tree = await wait_for(three, timeout=60, what="the server, the Worker and its standby")
        demo.send(signal.SIGINT)
        assert await demo.exit_code(timeout=10) == 0, demo.output
        assert {pid for pid in tree if alive(pid)} == set()
    assert "Traceback" not in demo.output


# ------------------------------------------------------------------------------------------------
# The mechanisms, one at a time
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tie", ["lifeline", "pdeathsig"])
async def test_each_tie_alone_ends_the_child_with_its_sigkilled_parent(tie: str) -> None:
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.tied_parent", tie, stdout=asyncio.subprocess.PIPE
    )
    assert parent.stdout is not None
    child = int((await asyncio.wait_for(parent.stdout.readline(), 30)).split()[-1])
    try:
        assert alive(child)
        parent.kill()
        await parent.wait()
        await wait_for(lambda: not alive(child), timeout=5, what=f"the {tie}-tied child to exit")
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


def supervisor_for(temporal_env: WorkflowEnvironment) -> WorkerSupervisor:
    queue = f"lifecycle-{uuid.uuid4().hex[:8]}"
    settings = TemporalSettings(
        _env_file=None,
        address=temporal_env.client.service_client.config.target_host,
        task_queue=queue,
        control_task_queue=f"{queue}-control",
    )
    return WorkerSupervisor(settings, DUMMY_WORKER, client=temporal_env.client, ready_timeout=30)


async def test_a_supervisor_cancelled_while_its_worker_starts_leaves_none(
    temporal_env: WorkflowEnvironment,
) -> None:
    supervisor = supervisor_for(temporal_env)
    starting = asyncio.create_task(supervisor.start())
    pid = await wait_for(lambda: supervisor.pid, timeout=10, what="the Worker child to spawn")
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert not alive(pid) and not supervisor.running


async def test_a_supervisor_whose_task_is_cancelled_or_raises_leaves_no_worker(
    temporal_env: WorkflowEnvironment,
) -> None:
    supervisor = supervisor_for(temporal_env)

    async def supervise() -> None:
        async with supervisor:
            await asyncio.Event().wait()

    task = asyncio.create_task(supervise())
    pid = await wait_for(lambda: supervisor.running and supervisor.pid, timeout=60, what="ready")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not alive(pid)

    with pytest.raises(RuntimeError, match="boom"):
        async with supervisor:
            last_pid = supervisor.pid
            raise RuntimeError("boom")
    assert last_pid is not None and not alive(last_pid)


async def test_a_router_call_outlives_its_cancelled_caller_until_drained(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # The router asks the hold switch first: holding it there keeps the call in flight.
    asked, answer = asyncio.Event(), asyncio.Event()

    async def hold() -> bool:
        asked.set()
        await answer.wait()
        return False

    queue = f"lifecycle-{uuid.uuid4().hex[:8]}"
    router = DrainingRouter(temporal_env.client, queue, Inbox(SqliteDatabase(tmp_path)), hold)
    customer = Actor(platform="local", user_id="customer")
    thread = ThreadRef(platform="local", workspace="local", channel="support", thread=queue)
    opening = InboundMessage(
        event_id="m1",
        thread=thread,
        message_id="m1",
        author=customer,
        text="please refund order 1234",
        opens_thread=True,
    )
    # The platform's task hands the message over and is cancelled (its platform stopping).
    platform = asyncio.create_task(router.on_message(opening))
    await wait_for(asked.is_set, what="the router call to be in flight")
    platform.cancel()
    with pytest.raises(asyncio.CancelledError):
        await platform
    assert router.in_flight == 1
    answer.set()

    assert await router.drain(10) == 0
    handle = temporal_env.client.get_workflow_handle(workflow_id_for(thread))
    # Started: the message reached Temporal although the platform's task was cancelled.
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    assert await Inbox(SqliteDatabase(tmp_path)).size() == 0
    assert await router.on_message(opening) == Routed.DUPLICATE
    await handle.terminate("test over")

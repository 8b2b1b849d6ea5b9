"""A host lost: its supervisor and Workers SIGKILLed at once, as a machine that loses power. Real
`refund-bot worker --supervised` processes on hosts "host-a" (two Workers) and "host-b" (one),
on the session's Temporal; /crash-worker goes through Temporal as from any bot replica.

    host-a's whole tree SIGKILLed -> 2 s later /crash-worker host-a: refused in one line, at once
        (the request's restart is taken within a second or never) -> a replacement host-a comes
        up under the same name and keeps its fresh Worker: the order was not meant for it
    host-a lost, then a new `refund-bot bot`: its status line counts host-b's Worker alone
        (heartbeats, not Temporal's minute-old poller list), though every host shares one machine
    a standby stopped while it still starts: exit 0, nothing left unawaited
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from agent.settings import AgentSettings, TemporalSettings
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from agent.temporal_client import connect
from bot.commands import Commands
from bot.hold import HoldSwitch
from bot.local.terminal import PEOPLE
from harness import free_port
from harness.cli_process import RefundBotProcess, clean_environment
from harness.codec import TEST_CODEC_ENV, TEST_KEY
from harness.conditions import wait_for
from harness.fakes.slack_api import FakeSlackApi
from refund_bot.wiring import SupervisorsOverTemporal
from worker.control import OrderExpired, RestartOrder, refuse_stale, supervisor_identity
from worker.lifecycle import alive
from worker.pollers import HEARTBEAT_FRESH, supervisor_hosts

PRESENTER = PEOPLE["presenter"]
STARTUP = 120.0
SUPERVISING = r"Supervising Worker pid ([\d, ]+) on (\S+);"


@dataclass
class Hosts:
    temporal_env: WorkflowEnvironment
    settings: TemporalSettings
    env: dict[str, str]
    tmp: Path
    stack: contextlib.AsyncExitStack

    async def supervised(self, host: str, workers: int = 1) -> tuple[RefundBotProcess, list[int]]:
        """`refund-bot worker --supervised` on `host`, once its Workers poll: it and their pids."""
        env = {
            **self.env,
            "DATA_DIR": str(self.tmp / f"{host}-{uuid.uuid4().hex[:4]}"),
            "REFUND_BOT_HOST": host,
            "REFUND_BOT_WORKERS": str(workers),
        }
        process = await RefundBotProcess.start(["worker", "--supervised"], env, self.tmp)
        self.stack.push_async_callback(process.close)
        match = await process.expect(SUPERVISING, timeout=STARTUP)
        assert match.group(2) == host
        return process, [int(pid) for pid in match.group(1).split(", ")]

    async def hosts_are(self, *expected: str) -> bool:
        """Whether the supervisors alive now are exactly on `expected` hosts."""
        client, t = self.temporal_env.client, self.settings
        return await supervisor_hosts(client, t.namespace, t.control_task_queue) == [*expected]


@pytest.fixture
async def lab(temporal_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Hosts]:
    queue = f"lost-{uuid.uuid4().hex[:8]}"
    settings = TemporalSettings(
        _env_file=None,
        address=temporal_env.client.service_client.config.target_host,
        task_queue=queue,
        control_task_queue=f"{queue}-control",
        embedded=False,
    )
    env = clean_environment(
        **TEST_CODEC_ENV,
        TEMPORAL_ADDRESS=settings.address,
        TEMPORAL_TASK_QUEUE=queue,
        TEMPORAL_CONTROL_TASK_QUEUE=settings.control_task_queue,
        TEMPORAL_EMBEDDED="false",
    )
    async with contextlib.AsyncExitStack() as stack:
        yield Hosts(temporal_env, settings, env, tmp_path, stack)


def sigkill_tree(process: RefundBotProcess) -> set[int]:
    """The whole tree at once, parent first, as a lost machine: nobody stops anybody."""
    pids = {process.pid, *process.tree()}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


async def test_a_lost_host_is_refused_at_once_and_its_replacement_keeps_its_worker(
    lab: Hosts, tmp_path: Path
) -> None:
    (host_a, a_workers), (_, b_workers) = await asyncio.gather(
        lab.supervised("host-a", workers=2), lab.supervised("host-b")
    )
    await wait_for(lambda: lab.hosts_are("host-a", "host-b"), timeout=30, what="both alive")
    agent = AgentSettings(_env_file=None, data_dir=tmp_path / "bot")
    grants = GrantStore(database_for(agent))
    await grants.seed()  # the local presenter holds the presenter role
    client = await connect(lab.settings, keys=[TEST_KEY])
    hold = HoldSwitch(database_for(agent), False)
    commands = Commands(client, SupervisorsOverTemporal(client, lab.settings), agent, grants, hold)

    # host-a is lost: its supervisor, both Workers and the standby die together.
    assert len(a_workers) == 2
    killed = sigkill_tree(host_a)
    lost_at = time.monotonic()
    await wait_for(lambda: not any(alive(p) for p in killed), timeout=10, what="host-a gone")
    await asyncio.sleep(2.0 - (time.monotonic() - lost_at))

    # Two seconds later, a presenter names it; a replacement host-a is starting meanwhile.
    replacement = asyncio.create_task(lab.supervised("host-a"))
    asked = time.monotonic()
    async with asyncio.timeout(15):  # the bug: 90 s of waiting, or the replacement's Worker killed
        reply = await commands.crash_worker(PRESENTER, "host-a")
    refused_in = time.monotonic() - asked
    # Refused before asking (its heartbeat already stale), or by the restart no one took.
    assert not reply.ok, reply.text
    assert "\n" not in reply.text, reply.text
    assert reply.text.startswith("No Worker supervisor answers on host 'host-a'"), reply.text
    assert reply.text.endswith("; they answer on: host-b."), reply.text
    print(f"/crash-worker host-a refused {refused_in:.2f} s after it was asked: {reply.text}")
    assert refused_in < 2.0, refused_in

    # The replacement comes up under the same name and is left alone: its first Worker lives on.
    host_a2, fresh = await replacement
    await wait_for(lambda: lab.hosts_are("host-a", "host-b"), timeout=30, what="host-a back")
    await asyncio.sleep(3.0)  # what a stale order would have needed to reach it
    assert all(alive(pid) for pid in fresh), host_a2.output
    assert "Worker restarted" not in host_a2.output, host_a2.output
    assert all(alive(pid) for pid in b_workers)

    # And it answers: /crash-worker host-a now restarts the replacement's Worker.
    restarted = await commands.crash_worker(PRESENTER, "host-a")
    assert restarted.ok and f"old pid {fresh[0]}," in restarted.text, restarted.text


async def test_a_new_bots_status_line_counts_only_the_workers_alive(
    lab: Hosts, tmp_path: Path
) -> None:
    """Seconds after host-a's two Workers were SIGKILLed, a new bot counts host-b's alone: their
    heartbeats stopped, though Temporal still lists their pollers and every host here shares this
    machine (no pid check could tell: the bot's own host is bot-1)."""
    (host_a, _), _ = await asyncio.gather(
        lab.supervised("host-a", workers=2), lab.supervised("host-b")
    )
    await wait_for(lambda: lab.hosts_are("host-a", "host-b"), timeout=30, what="both alive")
    sigkill_tree(host_a)
    lost_at = time.monotonic()
    await asyncio.sleep(HEARTBEAT_FRESH + 0.5)
    line = await _bot_status(lab, tmp_path)
    print(f"{time.monotonic() - lost_at:.1f} s after host-a was lost: {line}")
    workers = re.search(r"(\d+) Worker\(s\) polling '[^']+' \(([^)]*)\)", line)
    assert workers is not None, line
    assert (int(workers.group(1)), workers.group(2)) == (1, "host-b"), line


async def test_a_gone_host_alone_is_refused_in_one_line(lab: Hosts, tmp_path: Path) -> None:
    """No live supervisor at all: refused in one line, and nothing is left queued for later."""
    host_a, _ = await lab.supervised("host-a")
    await wait_for(lambda: lab.hosts_are("host-a"), timeout=30, what="host-a alive")
    sigkill_tree(host_a)
    await wait_for(lambda: lab.hosts_are(), timeout=10, what="host-a seen gone")
    agent = AgentSettings(_env_file=None, data_dir=tmp_path / "bot")
    grants = GrantStore(database_for(agent))
    await grants.seed()
    client = await connect(lab.settings, keys=[TEST_KEY])
    hold = HoldSwitch(database_for(agent), False)
    commands = Commands(client, SupervisorsOverTemporal(client, lab.settings), agent, grants, hold)
    asked = time.monotonic()
    reply = await commands.crash_worker(PRESENTER, "host-a")
    refused_in = time.monotonic() - asked
    print(f"/crash-worker host-a refused {refused_in:.3f} s after it was asked: {reply.text}")
    assert refused_in < 1.0
    assert not reply.ok and reply.text.startswith("No Worker supervisor answers"), reply.text


async def test_a_standby_stopped_while_it_starts_leaves_nothing_unawaited(
    lab: Hosts, tmp_path: Path
) -> None:
    env = {
        **lab.env,
        "DATA_DIR": str(tmp_path / "standby"),
        "WORKER_METRICS_ADDRESS": f"127.0.0.1:{free_port()}",
    }
    standby = await RefundBotProcess.start(["worker", "--standby"], env, tmp_path)
    lab.stack.push_async_callback(standby.close)
    # The metrics exporter is up: the stop handlers are installed and it is connecting.
    await standby.expect(r"metrics on http://", timeout=STARTUP)
    standby.send(signal.SIGTERM)
    assert await standby.exit_code(timeout=30) == 0, standby.output
    assert "ready; polls" not in standby.output  # it was stopped while still starting
    assert "never awaited" not in standby.output, standby.output
    assert "Traceback" not in standby.output, standby.output


async def _bot_status(lab: Hosts, tmp_path: Path) -> str:
    """A new `refund-bot bot`'s first status line (Slack in HTTP mode against the fake)."""
    async with FakeSlackApi(team_id="T0LOST") as slack:
        env = {
            **lab.env,
            "DATA_DIR": str(tmp_path / "bot-1"),
            "REFUND_BOT_HOST": "bot-1",
            "SLACK_BOT_TOKEN": slack.token,
            "SLACK_API_URL": slack.url,
            "SLACK_SIGNING_SECRET": "lost-host-signing-secret",
            "SLACK_SUPPORT_CHANNEL": "C0SUPPORT",
            "SLACK_PORT": str(free_port()),
        }
        bot = await RefundBotProcess.start(["bot"], env, tmp_path)
        try:
            match = await bot.expect(r"^status: .*$", timeout=STARTUP)
            assert await bot.stop(signal.SIGTERM) == 0, bot.output
        finally:
            await bot.close()
        return match.group(0)


def test_a_supervisor_obeys_only_a_fresh_order_meant_for_it() -> None:
    """The supervisor's own check, whatever brought the order to it (worker.control)."""
    me = supervisor_identity("host-a")
    now = time.time()
    refuse_stale(RestartOrder(host="host-a", supervisor=me, requested_at=now - 1), "host-a", now)
    refuse_stale(RestartOrder(), "host-a", now)  # anyone's, from a bot of the previous release
    for order, why in (
        (RestartOrder(host="host-a", requested_at=now - 30), "too late to obey"),
        (RestartOrder(host="host-b", requested_at=now), "was for host-b"),
        (RestartOrder(host="host-a", supervisor="refund-bot-supervisor-1@host-a"), "gone since"),
    ):
        with pytest.raises(OrderExpired, match=why):
            refuse_stale(order, "host-a", now)

"""/crash-worker with several supervisors: which Worker it restarts, and a host named by the
presenter. Two real supervisors (hosts "host-a" and "host-b") on the session's Temporal, each with
a real Worker child process; the command goes through Temporal as it does from any bot replica.

    /crash-worker          -> any supervisor; the reply names its host and pids, and the other host
    /crash-worker host-b   -> host-b's supervisor only: its Worker SIGKILLed, host-a's untouched
    /crash-worker host-z   -> refused in one line listing host-a, host-b; nothing killed
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.testing import WorkflowEnvironment

from agent.settings import AgentSettings, TemporalSettings
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from agent.temporal_client import connect
from bot.commands import Commands
from bot.hold import HoldSwitch
from bot.local.terminal import PEOPLE
from harness import queue_settings
from harness.codec import TEST_CODEC_ENV, TEST_CONVERTER, TEST_KEY
from harness.conditions import wait_for
from refund_bot.wiring import SupervisorsOverTemporal
from worker.lifecycle import alive
from worker.pollers import supervisor_hosts
from worker.supervisor import WorkerSupervisor

CHILD = [sys.executable, "-m", "tests.support.dummy_worker"]
PRESENTER = PEOPLE["presenter"]


@pytest.fixture
async def two_hosts(
    temporal_env: WorkflowEnvironment,
) -> AsyncIterator[tuple[dict[str, WorkerSupervisor], TemporalSettings]]:
    settings = queue_settings(temporal_env.client, "hosts")
    # A client each, as two hosts have: the SDK allows one Worker per queue on one client.
    supervisors = {
        host: WorkerSupervisor(
            settings,
            CHILD,
            client=await connect(settings, keys=[TEST_KEY]),
            env=TEST_CODEC_ENV,
            host=host,
        )
        for host in ("host-a", "host-b")
    }
    async with contextlib.AsyncExitStack() as stack:
        for supervisor in supervisors.values():
            await stack.enter_async_context(supervisor)
        yield supervisors, settings


def _pid(supervisor: WorkerSupervisor) -> int:
    """Its Worker's pid: the fixture started every supervisor."""
    assert supervisor.pid is not None
    return supervisor.pid


async def test_crash_worker_names_the_host_it_restarts(
    two_hosts: tuple[dict[str, WorkerSupervisor], TemporalSettings],
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
) -> None:
    supervisors, settings = two_hosts
    client = temporal_env.client
    agent = AgentSettings(_env_file=None, data_dir=tmp_path)
    grants = GrantStore(database_for(agent))
    await grants.seed()  # the local presenter holds the presenter role
    commands = Commands(
        client,
        SupervisorsOverTemporal(client, settings),
        agent,
        grants,
        HoldSwitch(database_for(agent), False),
    )
    assert await supervisor_hosts(client, "default", settings.control_task_queue) == [
        "host-a",
        "host-b",
    ]
    pids = {host: _pid(s) for host, s in supervisors.items()}

    # A host named: that host's Worker, and only it.
    named = await commands.crash_worker(PRESENTER, "host-b")
    assert named.ok, named.text
    new_b = supervisors["host-b"].pid
    assert named.text.startswith(
        f"Worker SIGKILLed and replaced on host-b (supervisor pid {os.getpid()}): "
        f"old pid {pids['host-b']}, new pid {new_b}, ready in "
    )
    assert "Other hosts" not in named.text
    assert new_b != pids["host-b"] and not alive(pids["host-b"])
    assert supervisors["host-a"].pid == pids["host-a"] and alive(pids["host-a"])

    # An unknown host: one line naming the hosts that answer; nothing killed.
    unknown = await commands.crash_worker(PRESENTER, "host-z")
    assert not unknown.ok
    assert unknown.text == (
        "No Worker supervisor answers on host 'host-z'; they answer on: host-a, host-b."
    )
    assert {h: s.pid for h, s in supervisors.items()} == {"host-a": pids["host-a"], "host-b": new_b}

    # None named: whichever supervisor takes it says so, and names the other host.
    before = {h: _pid(s) for h, s in supervisors.items()}
    anyone = await commands.crash_worker(PRESENTER)
    assert anyone.ok, anyone.text
    [(host, old)] = [(h, p) for h, p in before.items() if supervisors[h].pid != p]
    other = "host-b" if host == "host-a" else "host-a"
    assert f"replaced on {host} " in anyone.text and f"old pid {old}," in anyone.text
    assert anyone.text.endswith(f"Other hosts with a supervisor: {other} (/crash-worker <host>).")
    await wait_for(lambda: not alive(old), what="the restarted Worker gone")


async def test_crash_worker_without_any_supervisor_says_so(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    settings = TemporalSettings(
        _env_file=None,
        address=temporal_env.client.service_client.config.target_host,
        control_task_queue=f"nobody-{uuid.uuid4().hex[:8]}",
    )
    agent = AgentSettings(_env_file=None, data_dir=tmp_path)
    grants = GrantStore(database_for(agent))
    await grants.seed()
    control = SupervisorsOverTemporal(temporal_env.client, settings)
    hold = HoldSwitch(database_for(agent), False)
    reply = await Commands(temporal_env.client, control, agent, grants, hold).crash_worker(
        PRESENTER
    )
    assert not reply.ok and reply.text.startswith("No Worker supervisor answers")
    assert "refund-bot worker --supervised" in reply.text


async def test_a_supervisor_temporal_has_no_heartbeat_of_is_still_restarted(
    two_hosts: tuple[dict[str, WorkerSupervisor], TemporalSettings],
) -> None:
    """A process whose heartbeats never reach Temporal is not a lost host: its supervisor polls
    and takes the order (no one would within the pickup bound if none ran there). Before, the
    restart was refused at once while its neighbours' heartbeats were on record."""
    _, settings = two_hosts  # host-a and host-b heartbeat: Temporal keeps heartbeats
    silent_runtime = Runtime(telemetry=TelemetryConfig(), worker_heartbeat_interval=None)
    silent_client = await Client.connect(
        settings.address,
        namespace=settings.namespace,
        data_converter=TEST_CONVERTER,
        runtime=silent_runtime,
    )
    silent = WorkerSupervisor(
        settings, CHILD, client=silent_client, env=TEST_CODEC_ENV, host="host-c"
    )
    async with silent:
        old = _pid(silent)
        control = SupervisorsOverTemporal(await connect(settings, keys=[TEST_KEY]), settings)
        report = await control.restart("host-c")
        assert (report.host, report.old_pid, report.new_pid) == ("host-c", old, silent.pid)
        assert silent.pid != old and not alive(old)

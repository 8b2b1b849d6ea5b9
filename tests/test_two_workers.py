"""Two Workers polling at once (REFUND_BOT_WORKERS=2): a death replaces only the dead one, and only
the conversations it held lose their sticky Worker; each child has its own metrics port. Real dev
server, real child processes (tests/support/dummy_worker.py, and `refund-bot worker`)."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from harness import free_port, queue_settings
from harness.codec import TEST_CODEC_ENV
from harness.conditions import wait_for
from harness.stack import supervised_stack
from tests.support.dummy_worker import Echo
from worker.control import (
    RestartReport,
    request_worker_restart,
    reset_sticky_queues,
)
from worker.lifecycle import alive
from worker.supervisor import WorkerSupervisor

CHILD = [sys.executable, "-m", "tests.support.dummy_worker"]


@pytest.fixture
async def two(temporal_env: WorkflowEnvironment) -> AsyncIterator[WorkerSupervisor]:
    settings = queue_settings(temporal_env.client, f"two-{uuid.uuid4().hex[:6]}")
    sup = WorkerSupervisor(
        settings, CHILD, client=temporal_env.client, env=TEST_CODEC_ENV, workers=2
    )
    await sup.start()
    yield sup
    pids = sup.pids
    await sup.stop()
    assert not any(alive(pid) for pid in pids)


async def replacement_of(sup: WorkerSupervisor, dead: int) -> RestartReport:
    """The report of the restart that replaced `dead`, once its successor polls."""

    def replaced() -> RestartReport | None:
        report = sup.last_report
        return report if report is not None and report.old_pid == dead else None

    return await wait_for(replaced, timeout=30, what=f"pid {dead}'s replacement")


async def test_both_workers_poll_from_the_start(two: WorkerSupervisor) -> None:
    assert len(two.pids) == 2 and two.running
    assert await two.polling()


async def test_a_worker_that_dies_is_replaced_and_the_other_keeps_polling(
    two: WorkerSupervisor,
) -> None:
    dead, survivor = two.pids
    os.kill(dead, signal.SIGKILL)

    report = await replacement_of(two, dead)
    assert not alive(dead)
    assert alive(survivor), "a death must not take the other Worker with it"
    assert set(two.pids) == {survivor, report.new_pid} and two.running
    assert await two.polling()


async def test_crash_worker_replaces_every_worker(two: WorkerSupervisor, client: Client) -> None:
    before = set(two.pids)
    report = await request_worker_restart(client, two.settings.control_task_queue)
    # /crash-worker is the drill of a Worker host lost: no Worker keeps a conversation cached.
    assert report.old_pid in before
    assert not any(alive(pid) for pid in before)
    assert len(two.pids) == 2 and not before & set(two.pids)
    # The report comes once the first polls (conversations go on); the second joins when ready.
    await wait_for(two.polling, timeout=30, what="both new Workers polling")


async def test_the_sticky_reset_after_a_death_takes_only_what_the_dead_worker_held(
    client: Client,
) -> None:
    task_queue = f"held-{uuid.uuid4().hex[:6]}"
    namespace = client.namespace
    held_by = {}
    for identity in ("worker-a", "worker-b"):
        # One Worker at a time, so each conversation's first task runs, and stays, on that one.
        async with Worker(client, task_queue=task_queue, workflows=[Echo], identity=identity):
            handle = await client.start_workflow(
                Echo.run, "hello", id=f"echo-{uuid.uuid4().hex[:8]}", task_queue=task_queue
            )
            completed = functools.partial(_completed_a_task, handle)
            await wait_for(completed, timeout=10, what="the first task")
            held_by[identity] = handle

    async def listed() -> bool:
        return await reset_sticky_queues(client, namespace, task_queue) == 2

    await wait_for(listed, timeout=10, what="visibility to list both conversations")
    assert await reset_sticky_queues(client, namespace, task_queue, left_by={"worker-a"}) == 1
    assert await reset_sticky_queues(client, namespace, task_queue, left_by={"worker-c"}) == 0
    both = {"worker-a", "worker-b"}
    assert await reset_sticky_queues(client, namespace, task_queue, left_by=both) == 2
    for handle in held_by.values():
        await handle.terminate()


async def _completed_a_task(handle: WorkflowHandle[Any, Any]) -> bool:
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return True
    return False


def _slot(pid: int) -> int:
    """The metrics slot the supervisor gave a `refund-bot worker` child (`--metrics-slot=N`)."""
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    (value,) = [a.split(b"=", 1)[1] for a in args if a.startswith(b"--metrics-slot=")]
    return int(value)


async def test_each_worker_serves_metrics_on_its_own_port_and_a_promoted_standby_keeps_its_own(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """Two Workers and the standby: three ports from WORKER_METRICS_ADDRESS's. The standby starts
    while the Workers hold theirs: it must not be left with none (it used to be, and kept none
    after its promotion); a new child takes the port a dead one freed."""
    base = _free_ports(3)
    env = {"WORKER_METRICS_ADDRESS": f"127.0.0.1:{base}"}
    async with (
        supervised_stack(temporal_env, tmp_path, env, workers=2) as stack,
        aiohttp.ClientSession() as http,
    ):
        supervisor = stack.supervisor
        assert supervisor is not None
        standby = await wait_for(lambda: supervisor.standby_pid, timeout=60, what="a standby")
        assert sorted(_slot(pid) for pid in (*supervisor.pids, standby)) == [0, 1, 2]

        async def serves(port: int) -> bool:
            try:
                async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
                    return response.status == 200 and "temporal_" in await response.text()
            except aiohttp.ClientConnectionError:
                return False

        dead = next(pid for pid in supervisor.pids if _slot(pid) == 0)
        os.kill(dead, signal.SIGKILL)
        report = await replacement_of(supervisor, dead)
        assert report.new_pid == standby, "the standby is promoted into the dead Worker's place"
        await wait_for(
            lambda: serves(base + _slot(standby)), timeout=30, what="the promoted Worker's metrics"
        )
        new_standby = await wait_for(
            lambda: supervisor.standby_pid, timeout=60, what="a new standby"
        )
        assert _slot(new_standby) == 0  # the port the dead Worker freed


def _free_ports(count: int) -> int:
    """A free port whose next `count - 1` ports are free too."""
    for _ in range(20):
        base = free_port()
        with contextlib.ExitStack() as held:
            try:
                for port in range(base + 1, base + count):
                    held.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
        return base
    raise AssertionError(f"no {count} adjacent free ports")

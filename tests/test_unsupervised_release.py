"""A Worker no supervisor watches (`refund-bot worker` under systemd or Kubernetes), SIGKILLed
with open conversations: its successor on the host releases the dead Worker's sticky queue as it
starts, so a reply waits for that start, not for the 10 s sticky timeout (worker.sticky)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from temporalio.api.enums.v1 import EventType, TimeoutType, WorkflowTaskFailedCause
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from harness import queue_settings
from harness.codec import TEST_CODEC_ENV
from harness.conditions import wait_for
from tests.support.dummy_worker import start_sticky_echo
from worker.control import worker_identity
from worker.lifecycle import alive, spawn_child
from worker.pollers import worker_is_polling
from worker.sticky import sticky_queue_of

CHILD = [sys.executable, "-m", "tests.support.dummy_worker"]
HOST = "refund-bot-test-host"
RESET = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_STICKY_TASK_QUEUE


@pytest.fixture
async def workers(
    temporal_env: WorkflowEnvironment,
) -> AsyncIterator[tuple[str, Callable[[], Awaitable[int]]]]:
    """Starts unsupervised dummy Workers on one task queue and host (as systemd would, no
    lifeline; each dies with this process); every one left is killed at the end."""
    settings = queue_settings(temporal_env.client, "refund-bot-unsupervised")
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.address,
        "TEMPORAL_NAMESPACE": settings.namespace,
        "TEMPORAL_TASK_QUEUE": settings.task_queue,
        "REFUND_BOT_HOST": HOST,
        **TEST_CODEC_ENV,
    }
    procs: list[asyncio.subprocess.Process] = []

    async def start() -> int:
        proc = await spawn_child(CHILD, on_parent_death=signal.SIGKILL, env=env)
        procs.append(proc)
        return proc.pid

    yield settings.task_queue, start
    for proc in procs:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_successor_releases_the_dead_workers_sticky_queue_as_it_starts(
    client: Client, workers: tuple[str, Callable[[], Awaitable[int]]]
) -> None:
    task_queue, start = workers
    old = await start()
    dead = worker_identity(old, HOST)

    async def announced() -> bool:
        return await sticky_queue_of(client, dead) is not None

    await wait_for(announced, timeout=30, what="the first Worker to announce its sticky queue")
    handles = [await start_sticky_echo(client, task_queue) for _ in range(12)]
    os.kill(old, signal.SIGKILL)  # no supervisor sees it: the successor is all there is

    async def gone() -> bool:
        return not alive(old)

    await wait_for(gone, timeout=5, what="the first Worker to be gone")
    # Before the successor runs: each reply is queued on the dead Worker's sticky queue.
    await asyncio.gather(*(h.signal("reply", "again") for h in handles))
    new = await start()

    async def polling() -> bool:
        return await worker_is_polling(
            client, client.namespace, task_queue, worker_identity(new, HOST)
        )

    await wait_for(polling, timeout=30, what="the successor to poll")
    results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 30)
    assert results == ["hello again"] * len(handles)
    # No reply was left to wait out the sticky timeout on the dead queue (a workflow task timed
    # out schedule-to-start, 10 s after it was queued): the release sent them on (a sticky reset).
    # A reply Temporal handed to a poll of the killed Worker, before it saw the poll's connection
    # close, times out start-to-close instead: no release reaches it (docs/benchmarks.md).
    reset = 0
    for handle in handles:
        events = (await handle.fetch_history()).events
        timeouts = [
            e.workflow_task_timed_out_event_attributes.timeout_type
            for e in events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
        ]
        assert TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START not in timeouts
        causes = [
            e.workflow_task_failed_event_attributes.cause
            for e in events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
        assert causes in ([RESET], [])
        reset += causes == [RESET]
    assert reset >= len(handles) // 2

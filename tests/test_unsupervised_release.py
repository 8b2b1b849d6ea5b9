"""A Worker no supervisor watches (`refund-bot worker` under systemd or Kubernetes), SIGKILLed
with open conversations: a reply waits for its successor's start, not for the SDK's 10 s sticky
timeout (the successor resets the dead Worker's conversations; the sticky timeout is short)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from harness import queue_settings
from harness.codec import TEST_CODEC_ENV
from harness.conditions import wait_for
from tests.support.dummy_worker import start_sticky_echo, sticky_waits
from worker.control import worker_identity
from worker.lifecycle import alive, spawn_child
from worker.pollers import worker_is_polling

CHILD = [sys.executable, "-m", "tests.support.dummy_worker"]
HOST = "refund-bot-test-host"


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


async def test_a_reply_after_an_unsupervised_death_waits_only_for_the_successor(
    client: Client, workers: tuple[str, Callable[[], Awaitable[int]]]
) -> None:
    task_queue, start = workers
    old = await start()
    dead = worker_identity(old, HOST)

    async def first_polling() -> bool:
        return await worker_is_polling(client, client.namespace, task_queue, dead)

    await wait_for(first_polling, timeout=30, what="the first Worker to poll")
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
    # Each reply queued on the dead Worker's sticky queue waited there at most the Worker's short
    # sticky timeout (10 s with the SDK's default), whatever the successor's start took.
    waits = [w for h in handles for w in await sticky_waits(h)]
    assert waits and max(waits) < 5, waits  # the SDK's 10 s would show as 10

"""The Worker supervisor on a real dev server, with tests/support/dummy_worker.py as the child."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import statistics
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, TaskQueueKind, TimeoutType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from harness import queue_settings
from harness.codec import TEST_CODEC_ENV, TEST_CONVERTER
from harness.conditions import wait_for
from harness.crowd import at_most
from tests.support.dummy_worker import start_sticky_echo
from worker.control import (
    RestartReport,
    request_worker_restart,
    reset_sticky_queues,
    worker_identity,
)
from worker.lifecycle import alive
from worker.pollers import worker_is_polling
from worker.sticky import (
    PROBE_TRIES,
    StickyProbe,
    announce_in_background,
    announce_sticky_queue,
    probe_id,
    sticky_queue_of,
)
from worker.supervisor import WorkerSupervisor

CHILD = [sys.executable, "-m", "tests.support.dummy_worker"]
# Every restart these tests make, for the seconds_to_ready figure printed at teardown.
REPORTS: list[RestartReport] = []


@pytest.fixture(scope="module")
async def supervisor(temporal_env: WorkflowEnvironment) -> AsyncIterator[WorkerSupervisor]:
    """One supervised child for the module; each test leaves it running and polling."""
    settings = queue_settings(temporal_env.client, "refund-bot-test")
    sup = WorkerSupervisor(
        settings, CHILD, client=temporal_env.client, env=TEST_CODEC_ENV, ready_timeout=20
    )
    await sup.start()
    yield sup
    pid = sup.pid
    await sup.stop()
    assert pid is not None and not alive(pid)
    if REPORTS:
        times = [r.seconds_to_ready for r in REPORTS]
        print(
            f"\nseconds_to_ready over {len(times)} restarts: median {statistics.median(times):.2f}"
            f", min {min(times):.2f}, max {max(times):.2f}"
        )


async def polling(sup: WorkerSupervisor, pid: int) -> bool:
    s = sup.settings
    return await worker_is_polling(sup.client, s.namespace, s.task_queue, worker_identity(pid))


async def gone(pid: int) -> None:
    async def probe() -> bool:
        return not alive(pid)

    await wait_for(probe, timeout=5, what=f"pid {pid} to be gone")


async def test_start_waits_until_the_child_polls(supervisor: WorkerSupervisor) -> None:
    assert supervisor.running and supervisor.pid is not None
    assert await polling(supervisor, supervisor.pid)


async def test_crash_request_through_the_control_queue(
    supervisor: WorkerSupervisor, client: Client
) -> None:
    old_pid = supervisor.pid
    report = await request_worker_restart(client, supervisor.settings.control_task_queue)
    REPORTS.append(report)

    assert old_pid is not None and report.old_pid == old_pid
    assert report.new_pid != old_pid and report.new_pid == supervisor.pid
    assert report.host == supervisor.host
    await gone(old_pid)
    assert alive(report.new_pid)
    assert await polling(supervisor, report.new_pid)


async def test_a_child_that_dies_on_its_own_is_restarted(supervisor: WorkerSupervisor) -> None:
    old_pid = supervisor.pid
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)

    async def restarted() -> RestartReport | None:
        # The report is written once the new child polls, so it marks the end of the restart.
        report = supervisor.last_report
        return report if report is not None and report.old_pid == old_pid else None

    report = await wait_for(restarted, timeout=20, what="the supervisor to replace the child")
    REPORTS.append(report)
    assert not alive(old_pid)
    assert report.new_pid == supervisor.pid and alive(report.new_pid)
    assert await polling(supervisor, report.new_pid)


async def test_concurrent_restarts_are_serialised(supervisor: WorkerSupervisor) -> None:
    first, second = await asyncio.gather(supervisor.restart(), supervisor.restart())
    REPORTS.extend([first, second])
    # The lock is FIFO: the second restart replaced the child the first one started.
    assert second.old_pid == first.new_pid
    assert supervisor.pid == second.new_pid
    assert await polling(supervisor, second.new_pid)


async def test_reset_sticky_queues_counts_running_workflows(
    supervisor: WorkerSupervisor, client: Client
) -> None:
    s = supervisor.settings
    handle = await start_sticky_echo(client, s.task_queue)

    async def resets_one() -> bool:
        return await reset_sticky_queues(client, s.namespace, s.task_queue) == 1

    await wait_for(resets_one, timeout=10, what="visibility to list the running Echo")
    await handle.signal("reply", "there")
    assert await asyncio.wait_for(handle.result(), timeout=5) == "hello there"


async def test_open_conversation_resumes_promptly_after_a_kill(
    supervisor: WorkerSupervisor, client: Client
) -> None:
    s = supervisor.settings
    handle = await start_sticky_echo(client, s.task_queue)

    # The kill leaves the conversation sticky to a dead Worker; the supervisor must reset it.
    REPORTS.append(await request_worker_restart(client, s.control_task_queue))
    await handle.signal("reply", "again")
    # Without the reset this waits out the 10 s sticky schedule-to-start timeout (measured: 10.1 s).
    assert await asyncio.wait_for(handle.result(), timeout=5) == "hello again"


@contextlib.asynccontextmanager
async def announced_child(
    client: Client, queue: str
) -> AsyncIterator[tuple[WorkerSupervisor, int]]:
    """A supervisor of the test's own on `queue`, its child polling with its sticky queue
    announced: the child's death is then released in one call. Yields it and the child's pid."""
    settings = queue_settings(client, queue)
    sup = WorkerSupervisor(settings, CHILD, client=client, env=TEST_CODEC_ENV, ready_timeout=20)
    await sup.start()
    try:
        old = sup.pid
        assert old is not None

        async def announced() -> bool:
            return await sticky_queue_of(client, worker_identity(old)) is not None

        await wait_for(announced, timeout=20, what="the child to announce its sticky queue")
        yield sup, old
    finally:
        await sup.stop()


async def test_a_death_releases_the_sticky_queue_in_a_few_calls_not_one_per_conversation(
    temporal_env: WorkflowEnvironment,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Recovery that does not grow with the open conversations: the dead child's sticky queue is
    released by ShutdownWorker, twice a round of its drain (worker.sticky), fewer calls than it
    held conversations and never a sticky reset per conversation; and every conversation it held
    answers its next message at once."""
    caplog.set_level(logging.INFO, logger="worker.supervisor")
    target = temporal_env.client.service_client.config.target_host
    client = await Client.connect(target, data_converter=TEST_CONVERTER)
    calls: collections.Counter[str] = collections.Counter()
    for rpc in ("reset_sticky_task_queue", "shutdown_worker", "poll_workflow_task_queue"):
        real = getattr(client.workflow_service, rpc)

        async def counted(*args: Any, _real: Any = real, _rpc: str = rpc, **kw: Any) -> Any:
            calls[_rpc] += 1
            return await _real(*args, **kw)

        monkeypatch.setattr(client.workflow_service, rpc, counted)
    async with announced_child(client, "refund-bot-release") as (sup, old):
        handles = [await start_sticky_echo(client, sup.settings.task_queue) for _ in range(12)]
        calls.clear()
        os.kill(old, signal.SIGKILL)  # unannounced: the supervisor sees only a death
        await wait_for(lambda: sup.pid not in (None, old), timeout=20, what="a new child")
        await wait_for(lambda: polling(sup, sup.pid or 0), timeout=20, what="the new child to poll")
        await asyncio.gather(*(h.signal("reply", "again") for h in handles))
        # Left on the dead Worker's sticky queue, each would wait out the 10 s sticky timeout.
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 5)
        assert results == ["hello again"] * len(handles)
        # The release, done: the drain's polls, each round ended by the unload (made twice, see
        # worker.sticky), the last round finding nothing; no reset of each conversation.
        done = f"Released the sticky queue of {worker_identity(old)}"
        await wait_for(lambda: done in caplog.text, timeout=10, what="the release done")
        shutdowns = calls["shutdown_worker"]
        assert shutdowns % 2 == 0 and 2 <= shutdowns < len(handles), calls
        assert calls["reset_sticky_task_queue"] == 0


async def test_a_crowd_replying_while_the_release_drains_waits_out_no_sticky_timeout(
    temporal_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A support desk's crowd answers at once, right after a Worker's death, while its sticky
    queue is being released by a busy supervisor whose polls reach Temporal late, and are then
    refused for a while by a busy server's rate limit: every reply is handed to the normal queue,
    none is left on the dead queue to wait out the sticky timeout. (A release that unloaded the
    queue when its half-second window ended, its polls not yet there, left 137 of a held crowd of
    200 on it: bench.recovery.)"""
    target = temporal_env.client.service_client.config.target_host
    client = await Client.connect(target, data_converter=TEST_CONVERTER)
    late = asyncio.Event()  # the release's polls wait for it
    refusals = 100  # then the server's rate limit refuses the first ones
    real_poll = client.workflow_service.poll_workflow_task_queue

    async def poll_late(request: Any, *args: Any, **kw: Any) -> Any:
        nonlocal refusals
        if request.task_queue.kind == TaskQueueKind.TASK_QUEUE_KIND_STICKY:
            await late.wait()
            if refusals > 0:
                refusals -= 1
                raise RPCError(
                    "namespace rate limit exceeded", RPCStatusCode.RESOURCE_EXHAUSTED, b""
                )
        return await real_poll(request, *args, **kw)

    monkeypatch.setattr(client.workflow_service, "poll_workflow_task_queue", poll_late)
    async with announced_child(client, "refund-bot-crowd-release") as (sup, old):
        queue = sup.settings.task_queue
        handles = await at_most(20, (lambda: start_sticky_echo(client, queue) for _ in range(200)))
        os.kill(old, signal.SIGKILL)
        # At once: the replies reach Temporal while the supervisor learns of the death and
        # begins the release, in this same event loop; its polls arrive after any first window.
        asyncio.get_running_loop().call_later(1.5, late.set)
        await asyncio.gather(*(h.signal("reply", "again") for h in handles))
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 60)
        assert results == ["hello again"] * len(handles)
        # Only the sticky timeout counts: a reply the dying Worker's last poll took has no queue
        # to be released from, and waits out the workflow task's own timeout.
        sticky_timeouts = [
            h.id
            for h in handles
            for e in (await h.fetch_history()).events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
            and e.workflow_task_timed_out_event_attributes.timeout_type
            == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START
        ]
        assert sticky_timeouts == []


async def test_a_reply_queued_on_the_dead_workers_sticky_queue_before_the_release_goes_on(
    temporal_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply that reaches Temporal between the death and the release is queued on the dead
    Worker's sticky queue: the release hands it to the normal queue, not the 10 s timeout."""
    target = temporal_env.client.service_client.config.target_host
    client = await Client.connect(target, data_converter=TEST_CONVERTER)
    gate = asyncio.Event()  # the release waits for it: the reply is queued first
    for rpc in ("shutdown_worker", "poll_workflow_task_queue"):
        real = getattr(client.workflow_service, rpc)

        async def held(*args: Any, _real: Any = real, **kw: Any) -> Any:
            await gate.wait()
            return await _real(*args, **kw)

        monkeypatch.setattr(client.workflow_service, rpc, held)
    async with announced_child(client, "refund-bot-drain") as (sup, old):
        try:
            handle = await start_sticky_echo(client, sup.settings.task_queue)
            os.kill(old, signal.SIGKILL)
            await wait_for(lambda: sup.pid not in (None, old), timeout=20, what="a new child")
            await handle.signal("reply", "again")

            async def queued_on_the_dead_queue() -> bool:
                scheduled = [
                    e.workflow_task_scheduled_event_attributes.task_queue.name
                    for e in (await handle.fetch_history()).events
                    if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
                ]
                return scheduled[-1].startswith(f"{worker_identity(old)}-")

            await wait_for(queued_on_the_dead_queue, timeout=5, what="the reply's task, sticky")
            gate.set()
            # Left there, it would wait out the 10 s sticky timeout.
            assert await asyncio.wait_for(handle.result(), 5) == "hello again"
        finally:
            gate.set()  # before the supervisor stops: its release waits for it


async def test_a_probe_left_waiting_in_a_busy_queue_is_a_warning_that_says_why(
    client: Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A Worker whose sticky queue cannot be announced still runs; its one warning names the wait
    (a TimeoutError says nothing of itself: the warning would end in a colon)."""
    monkeypatch.setattr("worker.sticky._PROBE_TIMEOUT", timedelta(seconds=1))
    queue = f"refund-bot-unpolled-{uuid.uuid4().hex[:8]}"  # nobody polls: the probe waits
    with caplog.at_level(logging.WARNING, logger="worker.sticky"):
        await announce_in_background(client, queue, worker_identity(os.getpid()))
    assert [r.getMessage() for r in caplog.records] == [
        "Could not announce this Worker's sticky queue: its probe was not answered in 1 s "
        "(it waits in the task queue behind every conversation's task)"
    ]


async def test_a_probe_another_worker_took_is_left_to_finish_never_terminated(
    client: Client,
) -> None:
    """With several Workers the probe's first task may go to another; that Worker's next task
    ends the probe. Ended by a new start instead, the other Worker's answer would be refused
    ("Workflow task not found": a warning in its log, in 8 of 12 two-Worker recoveries)."""
    queue = f"refund-bot-other-{uuid.uuid4().hex[:8]}"
    nobody = f"nobody-{uuid.uuid4().hex[:8]}@nowhere"  # no Worker has this identity: every try
    async with Worker(client, task_queue=queue, workflows=[StickyProbe]):  # goes to this one
        assert await announce_sticky_queue(client, queue, nobody) is None
    query = f"WorkflowId = '{probe_id(nobody)}'"

    async def every_try_listed() -> list[WorkflowExecutionStatus | None]:
        runs = [run.status async for run in client.list_workflows(query)]
        # Visibility lags a moment behind the histories: wait for every run, and for each to be
        # seen closed, unless one was seen terminated already.
        settled = WorkflowExecutionStatus.RUNNING not in runs
        terminated = WorkflowExecutionStatus.TERMINATED in runs
        return runs if len(runs) == PROBE_TRIES and (settled or terminated) else []

    statuses = await wait_for(every_try_listed, timeout=10, what="the probe's runs listed")
    assert statuses == [WorkflowExecutionStatus.COMPLETED] * PROBE_TRIES

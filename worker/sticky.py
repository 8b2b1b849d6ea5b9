"""A Worker's sticky queue: learned when it starts, released in one call when it is gone.

    Worker polls -> announce_sticky_queue: a probe Workflow (id from the Worker's identity)
        whose second workflow task Temporal schedules on that Worker's sticky queue: its name
        is in the probe's history from then on
    Worker dies -> release_sticky_queue(identity): the probe's history names the queue
        -> ShutdownWorker(sticky_task_queue): Temporal unloads it, one call for any number of
           conversations
    (no supervisor) its successor starts -> release_previous_here: the same, for this host's
        Workers whose process is gone

Temporal routes each conversation's next workflow task to the sticky queue of the Worker that
holds it in its cache. The SDK names that queue "<identity>-<random uuid>" and says the name to
no one but Temporal (sdk-core `sticky_q_name_for_worker`), so the Worker finds it out from
Temporal, once, and leaves it there for whoever outlives it: any process that knows a dead
Worker's identity (its supervisor; or any live Worker, from Temporal's Worker heartbeats) reads
it back with one history read.

ShutdownWorker is what the SDK itself sends on a graceful stop. It unloads the sticky queue from
Temporal's matching service, which from then on answers every new task for it "sticky worker
unavailable", and history puts the task on the normal queue, where a live Worker takes it at once
(server: matching_engine AddWorkflowTask, transfer_queue_active_task_executor). A task queued on
the dead queue before the call would stay there until the sticky schedule-to-start timeout
(WORKER_STICKY_TIMEOUT, worker.settings) moved it, so the release first drains them
(release_sticky_queue).
Without a release, Temporal keeps queueing on a dead Worker's sticky queue for 10 s after its
last poll (matching's stickyPollerUnavailableWindow), and each of those tasks waits the timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from datetime import timedelta

from temporalio import workflow
from temporalio.api.enums.v1 import EventType, TaskQueueKind, WorkflowTaskFailedCause
from temporalio.api.failure.v1 import Failure
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    PollWorkflowTaskQueueRequest,
    RespondWorkflowTaskFailedRequest,
    ShutdownWorkerRequest,
)
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from worker.pollers import gone_here

log = logging.getLogger(__name__)

PROBE_WORKFLOW = "RefundBotStickyProbe"
# A probe whose Worker died half way through ends on its own.
_PROBE_TIMEOUT = timedelta(seconds=30)
# A dead Worker's sticky queue is polled at least _DRAIN each round before it is unloaded, and on
# until no task has come for _DRAIN_QUIET, or twice the round's longest wait between two tasks if
# that is longer: its backlog (a reply per conversation that heard from its customer since the
# death) comes in bursts when the server is busy, and an unload between two bursts leaves the rest
# there, each task waiting out the sticky timeout. Measured (bench.recovery --held 1000
# --breakdown): the releasing process's first polls reached Temporal more than half a second
# after the death (it promotes the standby and starts the next one then), a queue loaded again by
# a new round's polls began to hand out its tasks 0.4-0.5 s later, and the bursts of a crowd of
# 1,000 came up to 0.36 s apart. The rounds end with one that finds nothing, or at _DRAIN_MAX: a
# crowd still arriving keeps its release going, each task sent on as it comes.
_DRAIN = 1.0
_DRAIN_QUIET = 0.5
_DRAIN_MAX = 30.0
# Polls at once, each answered without waiting for the previous task's failure to be recorded: a
# crowd's replies reach the dead queue at hundreds a second. With 4 polls that each waited for
# their answer the drain took 100-170 tasks a second, and left the rest of a crowd of 300 to the
# sticky timeout; with 32, 294 of 300 in the same second.
_DRAIN_POLLERS = 32
# Temporal refuses a long poll shorter than a few seconds; the unload ends it sooner. No longer
# than 10 s: a busy server then refuses a poll over its rate limit at once (RESOURCE_EXHAUSTED)
# instead of holding it, and a held poll could reach the queue after its unload, and load it again.
_DRAIN_POLL_TIMEOUT = timedelta(seconds=10)
# A poll the server refused for now (its rate limit, a moment unavailable) is made again after
# this: a crowd's replies are what fills the rate limit, and a poll that gave up there would leave
# them on the queue.
_DRAIN_RETRY = 0.05
_RETRIED = frozenset({RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE})
# How the release fails a task it took: the cause an SDK gives for a sticky task of a Workflow it
# no longer caches, and a message whose end tells the release's failures from a Worker's own.
SENT_ON = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_STICKY_TASK_QUEUE
RELEASED = ": its sticky queue is released"
# With several Workers on the queue, the probe's first task may go to another one: tries.
PROBE_TRIES = 8


def probe_id(identity: str) -> str:
    """The probe Workflow's id for the Worker `identity`: whoever knows the identity finds it."""
    return f"refund-bot-sticky-queue-{identity}"


@workflow.defn(name=PROBE_WORKFLOW)
class StickyProbe:
    """Two workflow tasks: the first on the normal queue, the second (after `seen`) on the
    sticky queue of the Worker that ran the first. Nothing else: no Activity, no timer."""

    def __init__(self) -> None:
        self._seen = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._seen)

    @workflow.signal
    def seen(self) -> None:
        self._seen = True


async def announce_sticky_queue(client: Client, task_queue: str, identity: str) -> str | None:
    """Run the probe on `task_queue` until its sticky task names this Worker's (`identity`)
    sticky queue, and return the name; None if the Worker caches nothing (no sticky queue) or
    another Worker kept taking the probe."""
    handle = client.get_workflow_handle(probe_id(identity))
    for _ in range(PROBE_TRIES):
        handle = await client.start_workflow(
            StickyProbe.run,
            id=probe_id(identity),
            task_queue=task_queue,
            execution_timeout=_PROBE_TIMEOUT,
            id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
        )
        signaled = elsewhere = False
        async for event in handle.fetch_history_events(wait_new_event=True):
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and not signaled:
                # After the first task: the next one goes to its Worker's sticky queue.
                await handle.signal(StickyProbe.seen)
                signaled = True
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                queue = event.workflow_task_scheduled_event_attributes.task_queue
                if queue.kind == TaskQueueKind.TASK_QUEUE_KIND_STICKY:
                    if queue.name.startswith(f"{identity}-"):
                        return queue.name
                    # Another Worker's. That task ends the probe: read on until it has, then try
                    # again. A new start now would end it first, and that Worker's answer would
                    # be refused ("Workflow task not found", a warning in its log).
                    elsewhere = True
        if not elsewhere:
            # Closed without a sticky task: a Worker that caches nothing has no sticky queue.
            return None
    return None


async def sticky_queue_of(client: Client, identity: str) -> str | None:
    """The sticky queue of the Worker `identity`, as its probe left it in Temporal; None if it
    never announced one (it died before, or it is of an older release)."""
    handle = client.get_workflow_handle(probe_id(identity))
    try:
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                queue = event.workflow_task_scheduled_event_attributes.task_queue
                if queue.kind == TaskQueueKind.TASK_QUEUE_KIND_STICKY and queue.name.startswith(
                    f"{identity}-"
                ):
                    return queue.name
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
    return None


async def release_sticky_queue(
    client: Client,
    identity: str,
    task_queue: str,
    *,
    by: str,
    reason: str,
    sticky: str | None = None,
) -> int | None:
    """Release the sticky queue of the gone Worker `identity` (of `task_queue`): the tasks
    queued on it go back to the normal queue, and so will every later one. Returns how many
    were queued there (drained), or None if the queue's name is not known (the caller falls back
    to resetting each conversation). `by`: the releasing process's identity; `sticky`: the
    queue's name, if already known (one call less while replies may be arriving).

    ShutdownWorker alone would leave the tasks queued since the death where they are, each
    waiting out the sticky timeout (10 s). So the queue is drained first (_drain_then_unload),
    and unloaded while the drain's polls still wait. A task that reached the queue in the moment
    before the unload, with every poll busy, is left behind in it: another round's polls load the
    queue again and take it. The rounds end with one whose polls reached the queue and found
    nothing: a round the server refused polls in proves nothing, and another follows."""
    sticky = sticky or await sticky_queue_of(client, identity)
    if sticky is None:
        return None
    queue = TaskQueue(
        name=sticky, kind=TaskQueueKind.TASK_QUEUE_KIND_STICKY, normal_name=task_queue
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _DRAIN_MAX
    gone = Failure(message=f"{identity} is gone ({reason}){RELEASED}")
    drained = 0
    while True:
        took, refused_any = await _drain_then_unload(client, queue, by, reason, gone, deadline)
        drained += took
        if not (took or refused_any) or loop.time() >= deadline:
            return drained


async def _drain_then_unload(
    client: Client,
    queue: TaskQueue,
    by: str,
    reason: str,
    gone: Failure,
    deadline: float,
) -> tuple[int, bool]:
    """One round of the release: poll `queue` as its Worker would, _DRAIN_POLLERS polls at once,
    for _DRAIN seconds and on until the tasks stop coming (_DRAIN_QUIET) or `deadline`; fail
    each task taken with ResetStickyTaskQueue, what an SDK answers when a sticky task names a
    Workflow it no longer caches. Temporal clears the conversation's stickiness and schedules the
    task again at once on the normal queue, without counting an attempt (a WorkflowTaskFailed
    event in its history, `gone`, no command: replay is unchanged). Then ShutdownWorker, while the
    polls still wait: a task added before it meets a poll; one after it goes to the normal queue
    directly. Returns how many tasks were taken, and whether the server refused a poll."""
    drained = 0
    refused_any = False
    unloaded = asyncio.Event()
    loop = asyncio.get_running_loop()
    began = last = loop.time()
    quiet = _DRAIN_QUIET
    failing: set[asyncio.Future[None]] = set()

    async def fail(token: bytes) -> None:
        with contextlib.suppress(RPCError):  # it timed out or closed meanwhile
            await client.workflow_service.respond_workflow_task_failed(
                RespondWorkflowTaskFailedRequest(
                    namespace=client.namespace,
                    task_token=token,
                    cause=SENT_ON,
                    identity=by,
                    failure=gone,
                ),
                # Through a busy server's rate limit: a task taken and never answered waits
                # out the workflow task timeout instead.
                retry=True,
            )

    async def poll() -> None:
        nonlocal drained, refused_any, last, quiet
        while not unloaded.is_set():
            try:
                task = await client.workflow_service.poll_workflow_task_queue(
                    PollWorkflowTaskQueueRequest(
                        namespace=client.namespace, task_queue=queue, identity=by
                    ),
                    timeout=_DRAIN_POLL_TIMEOUT,
                )
            except RPCError as err:
                log.debug("Draining %s: %s", queue.name, err.message)
                if err.status not in _RETRIED:
                    return
                refused_any = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(unloaded.wait(), _DRAIN_RETRY)
                continue
            if not task.task_token:
                continue  # its unload answers an outstanding poll with nothing
            now = loop.time()
            if drained:  # not the wait for the first: the polls' way to a queue loading again
                quiet = max(quiet, 2 * (now - last))
            drained += 1
            last = now
            # Answered beside the next poll: the task token is history's, the queue plays no
            # further part, so the answer may come after the unload.
            failed = asyncio.ensure_future(fail(task.task_token))
            failing.add(failed)
            failed.add_done_callback(failing.discard)

    def unload() -> Awaitable[object]:
        # Shielded: even when cancelled, a queue left loaded after its last poll would take
        # tasks for another 10 s, and keep them for the sticky timeout.
        return asyncio.shield(
            client.workflow_service.shutdown_worker(
                ShutdownWorkerRequest(
                    namespace=client.namespace,
                    sticky_task_queue=queue.name,
                    identity=by,
                    reason=reason,
                )
            )
        )

    polls = [asyncio.ensure_future(poll()) for _ in range(_DRAIN_POLLERS)]
    try:
        while not all(p.done() for p in polls):
            until = min(max(began + _DRAIN, last + quiet), deadline)
            if loop.time() >= until:
                break
            await asyncio.wait(polls, timeout=until - loop.time())
    finally:
        unloaded.set()
        await unload()
        await asyncio.gather(*polls, return_exceptions=True)
        await asyncio.gather(*failing, return_exceptions=True)
        # A poll that reached Temporal only after the unload (a slow machine) loaded the queue
        # again: unloaded once more, now that no poll is left.
        await unload()
    return drained, refused_any


async def release_previous_here(client: Client, task_queue: str, identity: str) -> list[str]:
    """At the start of a Worker no supervisor watches (`refund-bot worker` under systemd or
    Kubernetes, restarted after a SIGKILL): release the sticky queues of this host's Workers that
    are gone (worker.pollers.gone_here), its own previous self included. Nobody else would: the
    conversations they held would each wait out the sticky timeout, 10 s, on a queue nobody
    polls. Called before this Worker announces its own queue (the same identity's probe). Returns
    the identities whose queue was released; a failure is logged, and costs only that wait."""
    try:
        gone = await gone_here(client, client.namespace, task_queue, identity)
        released = await asyncio.gather(
            *(
                release_sticky_queue(
                    client, old, task_queue, by=identity, reason="gone; released by its successor"
                )
                for old in gone
            )
        )
    except Exception as err:  # best effort: the worst case is the sticky timeout, not a Worker down
        log.warning("Could not release the sticky queues of this host's previous Workers: %s", err)
        return []
    found = []
    for old, drained in zip(gone, released, strict=True):
        if drained is not None:
            log.info("Released the sticky queue of %s (%d task(s) sent on)", old, drained)
            found.append(old)
    return found


async def announce_in_background(
    client: Client, task_queue: str, identity: str, *, after: Awaitable[object] | None = None
) -> None:
    """announce_sticky_queue, logged: a Worker that cannot announce still works (its
    conversations are then released one by one, the slower way). `after`: awaited first (the
    release of this identity's previous queue, which reads the probe this announce replaces)."""
    if after is not None:
        await after
    try:
        sticky = await asyncio.wait_for(
            announce_sticky_queue(client, task_queue, identity), _PROBE_TIMEOUT.total_seconds()
        )
    except TimeoutError:
        # The probe is a conversation's first task like any other: a crowd in the task queue
        # (a release of thousands) keeps it waiting.
        log.warning(
            "Could not announce this Worker's sticky queue: its probe was not answered in %.0f s "
            "(it waits in the task queue behind every conversation's task)",
            _PROBE_TIMEOUT.total_seconds(),
        )
        return
    except RPCError as err:
        log.warning("Could not announce this Worker's sticky queue: %s", err)
        return
    if sticky is None:
        log.warning("This Worker's sticky queue is not announced: the probe reached another")
    else:
        log.info("sticky queue %s announced", sticky)

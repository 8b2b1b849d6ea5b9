"""A Worker's sticky queue: learned when it starts, released in one call when it is gone.

    Worker polls -> announce_sticky_queue: a probe Workflow (id from the Worker's identity)
        whose second workflow task Temporal schedules on that Worker's sticky queue: its name
        is in the probe's history from then on
    Worker dies -> release_sticky_queue(identity): the probe's history names the queue
        -> ShutdownWorker(sticky_task_queue): Temporal unloads it, one call for any number of
           conversations

Temporal routes each conversation's next workflow task to the sticky queue of the Worker that
holds it in its cache. The SDK names that queue "<identity>-<random uuid>" and says the name to
no one but Temporal (sdk-core `sticky_q_name_for_worker`), so the Worker finds it out from
Temporal, once, and leaves it there for whoever outlives it: any process that knows a dead
Worker's identity (its supervisor; or any live Worker, from Temporal's Worker heartbeats) reads
it back with one history read.

ShutdownWorker is what the SDK itself sends on a graceful stop. It unloads the sticky queue from
Temporal's matching service, which from then on answers every new task for it "sticky worker
unavailable", and history puts the task on the normal queue, where a live Worker takes it at once
(server: matching_engine AddWorkflowTask, transfer_queue_active_task_executor). A task already
queued on the dead queue before the call stays there until the sticky schedule-to-start timeout
(worker.runner.STICKY_TIMEOUT) moves it: only replies that reach Temporal between the death and
the release (milliseconds, under a supervisor) wait that long. Without the release, Temporal keeps
queueing on a dead Worker's sticky queue for 10 s after its last poll (matching's
stickyPollerUnavailableWindow), and each of those tasks waits the timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from temporalio import workflow
from temporalio.api.enums.v1 import EventType, TaskQueueKind
from temporalio.api.workflowservice.v1 import ShutdownWorkerRequest
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

log = logging.getLogger(__name__)

PROBE_WORKFLOW = "RefundBotStickyProbe"
# A probe whose Worker died half way through ends on its own.
_PROBE_TIMEOUT = timedelta(seconds=30)
# With several Workers on the queue, the probe's first task may go to another one: tries.
_PROBE_TRIES = 8


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
    for _ in range(_PROBE_TRIES):
        handle = await client.start_workflow(
            StickyProbe.run,
            id=probe_id(identity),
            task_queue=task_queue,
            execution_timeout=_PROBE_TIMEOUT,
            id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
        )
        signaled = False
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
                    break  # another Worker's: try again
        else:
            # Closed without a sticky task: a Worker that caches nothing has no sticky queue.
            return None
        with contextlib.suppress(RPCError):  # it finished meanwhile
            await handle.signal(StickyProbe.seen)
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
    client: Client, identity: str, *, by: str, reason: str
) -> str | None:
    """Release the sticky queue of the gone Worker `identity` (ShutdownWorker in its name's
    stead); returns the queue released, or None if its name is not known (the caller falls
    back to resetting each conversation). `by`: the releasing process's identity."""
    sticky = await sticky_queue_of(client, identity)
    if sticky is None:
        return None
    await client.workflow_service.shutdown_worker(
        ShutdownWorkerRequest(
            namespace=client.namespace, sticky_task_queue=sticky, identity=by, reason=reason
        )
    )
    return sticky


async def announce_in_background(client: Client, task_queue: str, identity: str) -> None:
    """announce_sticky_queue, logged: a Worker that cannot announce still works (its
    conversations are then released one by one, the slower way)."""
    try:
        sticky = await asyncio.wait_for(
            announce_sticky_queue(client, task_queue, identity), _PROBE_TIMEOUT.total_seconds()
        )
    except (RPCError, TimeoutError) as err:
        log.warning("Could not announce this Worker's sticky queue: %s", err)
        return
    if sticky is None:
        log.warning("This Worker's sticky queue is not announced: the probe reached another")
    else:
        log.info("sticky queue %s announced", sticky)

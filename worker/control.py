"""The control plane of the Worker process: its identity, the restart request, the sticky reset.

    /crash-worker [host] -> worker.pollers.live_supervisors (the supervisors' heartbeats)
        -> RestartWorker(RestartOrder: the host, the supervisor seen alive there)
        -> on the shared control queue, run by any live supervisor
        -> restart_worker on `host`'s own queue: taken within PICKUP_TIMEOUT or never
        -> that supervisor: SIGKILL, sticky reset, new Worker polling -> RestartReport
        (not taken in time, or taken too late to obey: NoSupervisorAnswers, one line)

Importable without side effects (the workflow sandbox re-imports it for RestartWorker). A
`/crash-worker` request travels through Temporal, so it reaches a supervisor on this host or
another: every supervisor polls the control task queue (any of them takes a request there) and
its host's own, `<control queue>@<host>` (`/crash-worker <host>`).

A host that is gone must not be waited for, and its successor must not obey what was meant for
it. Temporal keeps listing a dead host's pollers for a minute or more, so the request does not
trust that list: the Workflow runs wherever a supervisor is alive, and hands the restart to the
named host's queue with a schedule-to-start timeout of a second. A host with no live poller never
starts it (the request fails at once: "does not answer"), and a task not started in time is never
started later. The order names the supervisor that was alive when it was made, and the time it
was made: a replacement that comes up under the same name within that second refuses an order
meant for its predecessor, and any supervisor refuses one older than ORDER_MAX_AGE (a request
whose Workflow waited for a supervisor to come up).

The presenter's paused restart (no Worker alive while the story reads Event History) is a control
Workflow of the demo's own (demo/paused_restart.py), served beside this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Collection
from datetime import timedelta
from typing import TypeVar

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import (
    GetWorkflowExecutionHistoryReverseRequest,
    ResetStickyTaskQueueRequest,
)
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout
from temporalio.service import RPCError

log = logging.getLogger(__name__)

T = TypeVar("T")

RESTART_WORKFLOW = "RestartWorker"
RESTART_ACTIVITY = "restart_worker"
# Killing, resetting sticky queues, starting and waiting for the new Worker's poller.
RESTART_ACTIVITY_TIMEOUT = timedelta(seconds=60)
# Sticky resets in flight at once after a Worker dies.
RESET_CONCURRENCY = 32
# Events read back from a conversation's end to find which Worker it is sticky to: a workflow
# task's completion is followed by at most a few commands' events and Signals.
_REVERSE_PAGE = 20
# A request's whole life: no supervisor on the queue must not leave the caller waiting for ever.
REQUEST_TIMEOUT = timedelta(seconds=90)
# A supervisor takes the restart within this long of its scheduling, or never: a live one's
# control Worker always has polls waiting, and takes it in milliseconds.
PICKUP_TIMEOUT = timedelta(seconds=1)
# While it restarts its Worker, the supervisor heartbeats each second: a host lost after it took
# the request (its process or its network) is known within this, not after a minute.
RESTART_HEARTBEAT_TIMEOUT = timedelta(seconds=5)
RESTART_HEARTBEAT_EVERY = 1.0
# A supervisor refuses an order made longer ago than this: it was meant for whoever answered then
# (hosts' clocks may differ by a second or two; Temporal's start time is the reference).
ORDER_MAX_AGE = timedelta(seconds=5)
# The first Workflow task of a request is taken by any live supervisor in milliseconds; one not
# taken after this long has no supervisor anywhere to take it (all of them lost a moment ago).
_FIRST_TASK_WAIT = 3.0
# RestartWorker before orders: the restart on the Workflow's own queue, taken whenever.
ORDER_EXPIRES_PATCH = "restart-order-expires"


def worker_identity(pid: int | None = None, host: str | None = None) -> str:
    """The Temporal identity of the Worker process `pid` on `host` (default: this process, this
    machine's hostname; REFUND_BOT_HOST names it otherwise).

    The child sets it on its Worker; the supervisor recognises the child's poller by it.
    """
    pid = pid if pid is not None else os.getpid()
    return f"refund-bot-worker-{pid}@{host or socket.gethostname()}"


def supervisor_identity(host: str, pid: int | None = None) -> str:
    """The identity a supervisor's control Worker polls with: its host is read back from it."""
    return f"refund-bot-supervisor-{pid if pid is not None else os.getpid()}@{host}"


def host_control_queue(control_task_queue: str, host: str) -> str:
    """The control queue only `host`'s supervisor polls: `/crash-worker <host>` goes there."""
    return f"{control_task_queue}@{host}"


class RestartReport(BaseModel):
    """What a Worker restart did, as the supervisor that did it saw it."""

    old_pid: int | None
    new_pid: int
    # From the start of the restart (the SIGKILL, or handling the death) until Temporal lists the
    # new child's poller: the time a conversation could not make progress.
    seconds_to_ready: float
    host: str
    supervisor_pid: int | None = None  # None: a supervisor from before it was reported
    # Of seconds_to_ready, how long the Worker was held down on purpose (while_down).
    seconds_paused: float = 0.0


class RestartOrder(BaseModel):
    """What a restart request asks of a supervisor: whose Worker, and when it was asked."""

    host: str | None = None  # None: any supervisor's
    # The supervisor (its identity) seen alive on `host` when the order was made: only it obeys.
    # None: whichever supervisor of `host` takes it (Temporal keeps no heartbeats to tell).
    supervisor: str | None = None
    # Seconds since the epoch, Temporal's clock: when the request's Workflow started.
    requested_at: float | None = None


class NoSupervisorAnswers(Exception):
    """No supervisor took a restart request while it was still meant (the message: one line,
    without its full stop, which the caller adds after what it knows: the hosts alive)."""


class OrderExpired(ApplicationError):
    """A supervisor was handed an order too old (or for another host) to obey."""

    def __init__(self, message: str) -> None:
        super().__init__(message, type="OrderExpired", non_retryable=True)


def refuse_stale(order: RestartOrder, host: str, now: float | None = None) -> None:
    """Raise OrderExpired unless `order` is for this supervisor (`host`'s, this process) or
    anyone's, and younger than ORDER_MAX_AGE: a supervisor obeys only what was asked of it, while
    it was asked."""
    if order.host is not None and order.host != host:
        raise OrderExpired(f"the order was for {order.host}, not {host}")
    if order.supervisor is not None and order.supervisor != supervisor_identity(host):
        raise OrderExpired(
            f"the order was for {order.supervisor}, gone since; {host}'s supervisor is now "
            f"{supervisor_identity(host)}"
        )
    if order.requested_at is None:
        return
    age = (time.time() if now is None else now) - order.requested_at
    if age > ORDER_MAX_AGE.total_seconds():
        raise OrderExpired(
            f"the order reached {host} {age:.1f} s after it was made: too late to obey "
            f"(at most {ORDER_MAX_AGE.total_seconds():.0f} s)"
        )


async def heartbeating(step: Awaitable[T]) -> T:
    """Run an Activity's `step` to its end, heartbeating every RESTART_HEARTBEAT_EVERY meanwhile.
    Not cut short if the Activity is cancelled: a restart half done would leave no Worker."""
    task = asyncio.ensure_future(step)
    while True:
        activity.heartbeat()
        done, _ = await asyncio.wait({task}, timeout=RESTART_HEARTBEAT_EVERY)
        if done:
            return task.result()


@workflow.defn(name=RESTART_WORKFLOW)
class RestartWorker:
    """One restart of the Worker process, executed by supervisors' control Workers."""

    @workflow.run
    async def run(self, order: RestartOrder | None = None) -> RestartReport:
        if not workflow.patched(ORDER_EXPIRES_PATCH):
            # A request made before orders expired: replayed as it ran.
            return await workflow.execute_activity(  # EXTERNAL EFFECT: SIGKILL, a new Worker
                RESTART_ACTIVITY,
                start_to_close_timeout=RESTART_ACTIVITY_TIMEOUT,
                # A crash request is not repeated: a retry would kill the Worker a second time.
                retry_policy=RetryPolicy(maximum_attempts=1),
                result_type=RestartReport,
            )
        info = workflow.info()
        order = order or RestartOrder()
        host = order.host
        stamped = order.model_copy(update={"requested_at": info.start_time.timestamp()})
        # The host's own queue (its supervisor only), or any supervisor's: this Workflow's.
        queue = host_control_queue(info.task_queue, host) if host else info.task_queue
        return await workflow.execute_activity(  # EXTERNAL EFFECT: SIGKILL and a new Worker
            RESTART_ACTIVITY,
            stamped,
            task_queue=queue,
            # Taken at once or never: a host that does not answer is refused now, and a task
            # not taken in time cannot reach a later supervisor of the same name.
            schedule_to_start_timeout=PICKUP_TIMEOUT,
            start_to_close_timeout=RESTART_ACTIVITY_TIMEOUT,
            heartbeat_timeout=RESTART_HEARTBEAT_TIMEOUT,
            # A crash request is not repeated: a retry would kill the Worker a second time.
            retry_policy=RetryPolicy(maximum_attempts=1),
            result_type=RestartReport,
        )


async def request_worker_restart(
    client: Client,
    control_task_queue: str,
    host: str | None = None,
    *,
    supervisor: str | None = None,
    execution_timeout: timedelta = REQUEST_TIMEOUT,
) -> RestartReport:
    """Ask a supervisor to SIGKILL and restart its Worker: `host`'s, or any that polls
    `control_task_queue` (the report says whose). `supervisor`: the identity of the one seen
    alive on `host` (worker.pollers.live_supervisors): no other obeys.

    `client` must use agent.temporal_client's data converter (pydantic, encrypted). Raises
    NoSupervisorAnswers (one line) if no supervisor took it while it was meant: `host` does not
    answer, none answers, or the one that took it was lost; WorkflowFailureError if the restart
    itself failed.
    """
    handle = await client.start_workflow(
        RestartWorker.run,
        RestartOrder(host=host, supervisor=supervisor),
        id=f"restart-worker-{uuid.uuid4().hex}",
        # Any live supervisor runs the request; the restart itself goes to `host`'s queue.
        task_queue=control_task_queue,
        # Without a supervisor on the queue the request would otherwise wait forever.
        execution_timeout=execution_timeout,
    )
    result = asyncio.ensure_future(handle.result())
    await asyncio.wait({result}, timeout=_FIRST_TASK_WAIT)
    if not result.done() and (await handle.describe()).history_length <= 2:
        # Started and its first task scheduled, nothing since: no supervisor anywhere took it.
        # Ended now, so none that comes up later runs it.
        result.cancel()
        with contextlib.suppress(RPCError):  # it ran meanwhile, and finished
            await handle.terminate("no supervisor took the request")
        with contextlib.suppress(BaseException):
            await result
        raise NoSupervisorAnswers(
            f"No Worker supervisor answers: none took the restart request within "
            f"{_FIRST_TASK_WAIT:.0f} s"
        )
    try:
        return await result
    except WorkflowFailureError as err:
        raise not_answered(err, host) or err from err


def not_answered(err: WorkflowFailureError, host: str | None) -> NoSupervisorAnswers | None:
    """The one line for a restart no supervisor took while it was meant, or None."""
    who = f"host {host!r}" if host else "any host"
    cause = err.cause
    if not isinstance(cause, ActivityError):
        return None
    inner = cause.cause
    if isinstance(inner, ActivityTimeout) and inner.type == TimeoutType.SCHEDULE_TO_START:
        return NoSupervisorAnswers(
            f"No Worker supervisor answers on {who}: none took the restart request within "
            f"{PICKUP_TIMEOUT.total_seconds():.0f} s"
        )
    if isinstance(inner, ActivityTimeout) and inner.type == TimeoutType.HEARTBEAT:
        return NoSupervisorAnswers(
            f"The Worker supervisor on {who} took the restart request, then stopped answering "
            "(its host may be lost)"
        )
    if isinstance(inner, ApplicationError) and inner.type == "OrderExpired":
        # Taken by a supervisor the order was not meant for (a replacement), or too late.
        return NoSupervisorAnswers(f"No Worker supervisor answers on {who}: {inner.message}")
    return None


async def reset_sticky_queues(
    client: Client,
    namespace: str,
    task_queue: str,
    *,
    left_by: Collection[str] | None = None,
) -> int:
    """Clear the sticky queue of every running Workflow on `task_queue`; returns how many.

    After a Worker dies, Temporal would route each conversation's next workflow task to the dead
    Worker's sticky queue until the sticky schedule-to-start timeout; resetting sends it to the
    normal queue, where a live Worker picks it up at once.

    `left_by`: only the conversations whose last workflow task was completed by a Worker with one
    of these identities (the dead ones). A conversation sticky to a Worker that is still alive is
    left to it: reset, its next task would go to any Worker, which must replay it from the start
    of its history, instead of the Worker that holds it in its cache.
    """
    query = f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Running'"
    gate = asyncio.Semaphore(RESET_CONCURRENCY)

    async def reset(workflow_id: str, run_id: str) -> bool:
        execution = WorkflowExecution(workflow_id=workflow_id, run_id=run_id)
        async with gate:
            try:
                if left_by is not None:
                    last = await last_completed_by(client, namespace, execution)
                    if last is not None and last not in left_by:
                        return False
                await client.workflow_service.reset_sticky_task_queue(
                    ResetStickyTaskQueueRequest(namespace=namespace, execution=execution)
                )
            except RPCError as err:  # it closed since the listing: nothing to reset
                log.debug("No sticky reset for %s: %s", workflow_id, err.message)
                return False
        return True

    # Concurrently: with hundreds of open conversations, one at a time is seconds of waiting.
    resets = [reset(wf.id, wf.run_id) async for wf in client.list_workflows(query)]
    return sum(await asyncio.gather(*resets))


async def last_completed_by(
    client: Client, namespace: str, execution: WorkflowExecution
) -> str | None:
    """The identity of the Worker that completed the execution's last workflow task (the Worker
    it is sticky to), read from the end of its history; None if none is found near the end,
    which its caller treats as "anyone's": reset."""
    response = await client.workflow_service.get_workflow_execution_history_reverse(
        GetWorkflowExecutionHistoryReverseRequest(
            namespace=namespace, execution=execution, maximum_page_size=_REVERSE_PAGE
        )
    )
    for event in response.history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return event.workflow_task_completed_event_attributes.identity
    return None

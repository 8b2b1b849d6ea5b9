"""The control plane of the Worker process: its identity, the restart request, the sticky reset.

Importable without side effects (the workflow sandbox re-imports it for RestartWorker). A
`/crash-worker` request travels through Temporal, so it reaches a supervisor on this host or
another: every supervisor polls the control task queue (any of them takes a request there) and
its host's own, `<control queue>@<host>` (`/crash-worker <host>`). Which hosts have a supervisor
is Temporal's answer too: the pollers it lists on the control queue (worker.supervisor).

    /crash-worker [host] -> worker.supervisor.supervisor_hosts (DescribeTaskQueue)
        -> RestartWorker on the queue
        -> that supervisor's restart_worker Activity: SIGKILL, sticky reset, new Worker polling

A paused restart (the presenter's story reads Event History while no Worker is alive) splits it:

    paused_worker_restart -> RestartWorker(PauseRequest) -> kill_worker: SIGKILL, hold it down
        -> Update worker_down returns -> while_down() -> Signal resume (or the limit)
        -> start_worker on the killer's host queue: standby promoted, sticky reset, polling
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Collection
from datetime import timedelta

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import (
    GetWorkflowExecutionHistoryReverseRequest,
    ResetStickyTaskQueueRequest,
)
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

with workflow.unsafe.imports_passed_through():  # the sandbox need not re-import process code
    from worker.lifecycle import to_the_end

log = logging.getLogger(__name__)

RESTART_WORKFLOW = "RestartWorker"
RESTART_ACTIVITY = "restart_worker"
# Killing, resetting sticky queues, starting and waiting for the new Worker's poller.
RESTART_ACTIVITY_TIMEOUT = timedelta(seconds=60)
# Sticky resets in flight at once after a Worker dies.
RESET_CONCURRENCY = 32
# Events read back from a conversation's end to find which Worker it is sticky to: a workflow
# task's completion is followed by at most a few commands' events and Signals.
_REVERSE_PAGE = 20
KILL_ACTIVITY = "kill_worker"
START_ACTIVITY = "start_worker"
# The longest a paused restart holds a Worker down. The supervisor enforces it on its own clock,
# so a presenter's bot that dies mid-pause (its resume never sent) leaves the Worker down for at
# most this long; a minute is ample to read a conversation's history and show it.
PAUSE_LIMIT = timedelta(seconds=60)
# A request's whole life, apart from its pause: no supervisor on the queue must not leave the
# caller waiting for ever.
REQUEST_TIMEOUT = timedelta(seconds=90)


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
    # Of seconds_to_ready, how long the Worker was held down on purpose (a paused restart).
    seconds_paused: float = 0.0


class PauseRequest(BaseModel):
    """Hold the killed Worker down until resumed, for at most `max_seconds` (the supervisor's
    own limit, PAUSE_LIMIT unless it was built with another, caps it too)."""

    max_seconds: float = Field(default=PAUSE_LIMIT.total_seconds(), gt=0)


class WorkerDown(BaseModel):
    """The first half of a paused restart, done: the old Worker is dead and none polls."""

    old_pid: int | None
    host: str
    supervisor_pid: int
    # The killing supervisor's own control queue: the resume must reach it, not any supervisor.
    resume_queue: str
    # It restarts the Worker by itself after this long, resumed or not.
    held_seconds: float


@workflow.defn(name=RESTART_WORKFLOW)
class RestartWorker:
    """One restart of the Worker process, executed by supervisors' control Workers.

    Without input (/crash-worker, and every restart recorded before pauses existed) it issues the
    one command it always did: the input, in the history's first event, chooses the path, so no
    workflow.patched is needed for the paused one.
    """

    def __init__(self) -> None:
        self._down: WorkerDown | None = None  # EXECUTION STATE: the kill is done
        self._kill_failed = False  # EXECUTION STATE
        self._resumed = False  # EXECUTION STATE: the caller has read what it wanted

    @workflow.run
    async def run(self, pause: PauseRequest | None = None) -> RestartReport:
        if pause is None:
            return await workflow.execute_activity(  # EXTERNAL EFFECT: SIGKILL and a new Worker
                RESTART_ACTIVITY,
                start_to_close_timeout=RESTART_ACTIVITY_TIMEOUT,
                # A crash request is not repeated: a retry would kill the Worker a second time.
                retry_policy=RetryPolicy(maximum_attempts=1),
                result_type=RestartReport,
            )
        try:
            self._down = await workflow.execute_activity(  # EXTERNAL EFFECT: SIGKILL, held down
                KILL_ACTIVITY,
                pause,
                start_to_close_timeout=RESTART_ACTIVITY_TIMEOUT,
                retry_policy=RetryPolicy(maximum_attempts=1),  # as above: never killed twice
                result_type=WorkerDown,
            )
        except Exception:
            self._kill_failed = True
            await workflow.wait_condition(workflow.all_handlers_finished)  # worker_down answers
            raise
        with contextlib.suppress(asyncio.TimeoutError):
            # DURABLE WAIT: the caller's resume, or the pause's limit (the supervisor's own
            # clock bounds it too, should this Workflow never get here).
            await workflow.wait_condition(lambda: self._resumed, timeout=pause.max_seconds)
        return await workflow.execute_activity(  # EXTERNAL EFFECT: the new Worker starts
            START_ACTIVITY,
            task_queue=self._down.resume_queue,
            start_to_close_timeout=RESTART_ACTIVITY_TIMEOUT,
            # Safe to repeat: a second call returns the same restart's report.
            retry_policy=RetryPolicy(maximum_attempts=3),
            result_type=RestartReport,
        )

    @workflow.update
    async def worker_down(self) -> WorkerDown:
        """Returns once the old Worker is dead (fails if the kill did)."""
        await workflow.wait_condition(lambda: self._down is not None or self._kill_failed)
        if self._down is None:
            raise ApplicationError("the Worker was not killed", non_retryable=True)
        return self._down

    @workflow.signal
    def resume(self) -> None:
        self._resumed = True


async def request_worker_restart(
    client: Client,
    control_task_queue: str,
    host: str | None = None,
    *,
    execution_timeout: timedelta = REQUEST_TIMEOUT,
) -> RestartReport:
    """Ask a supervisor to SIGKILL and restart its Worker: `host`'s, or any that polls
    `control_task_queue` (the report says whose).

    `client` must use agent.temporal_client's data converter (pydantic, encrypted). Raises
    temporalio.client.WorkflowFailureError if the restart failed or no supervisor took it in time.
    """
    queue = control_task_queue if host is None else host_control_queue(control_task_queue, host)
    return await client.execute_workflow(
        RestartWorker.run,
        id=f"restart-worker-{uuid.uuid4().hex}",
        task_queue=queue,
        # Without a supervisor on the queue the request would otherwise wait forever.
        execution_timeout=execution_timeout,
    )


async def paused_worker_restart(
    client: Client,
    control_task_queue: str,
    host: str | None,
    while_down: Callable[[], Awaitable[None]],
    *,
    max_seconds: float = PAUSE_LIMIT.total_seconds(),
) -> RestartReport:
    """Like request_worker_restart, with `while_down` awaited after the old Worker is dead and
    before a new one polls: no Worker of that supervisor is alive while it runs, for at most
    `max_seconds` (and the supervisor's own limit): past it the Worker comes back regardless.

    If `while_down` raises, the Worker is resumed (and waited for) and the error propagates.
    Raises temporalio.client.WorkflowFailureError if the kill or the restart failed.
    """
    queue = control_task_queue if host is None else host_control_queue(control_task_queue, host)
    budget = REQUEST_TIMEOUT.total_seconds() + max_seconds
    handle = await client.start_workflow(
        RestartWorker.run,
        PauseRequest(max_seconds=max_seconds),
        id=f"restart-worker-{uuid.uuid4().hex}",
        task_queue=queue,
        execution_timeout=timedelta(seconds=budget),
    )
    try:
        down = await asyncio.wait_for(handle.execute_update(RestartWorker.worker_down), budget)
    except (WorkflowUpdateFailedError, RPCError) as err:
        # The kill failed (or no supervisor took it): the Workflow's failure says why.
        await asyncio.wait_for(handle.result(), budget)
        raise RuntimeError(f"{handle.id} restarted the Worker without the pause: {err}") from err
    log.info("Worker pid %s down on %s; resuming after the caller's read", down.old_pid, down.host)
    reading = time.monotonic()
    try:
        await while_down()
    except BaseException as err:
        await to_the_end(_resume(handle))  # even when cancelled
        if isinstance(err, Exception):  # an error, not a cancellation: the Worker back first
            with contextlib.suppress(Exception):
                await asyncio.wait_for(handle.result(), budget)
        raise
    if (took := time.monotonic() - reading) > down.held_seconds:
        # The Worker came back while it still ran: what it read may not be "no Worker alive".
        log.warning("while_down took %.1f s, past the pause's %.0f s", took, down.held_seconds)
    await to_the_end(_resume(handle))
    return await asyncio.wait_for(handle.result(), budget)


async def _resume(handle: WorkflowHandle[RestartWorker, RestartReport]) -> None:
    try:
        await handle.signal(RestartWorker.resume)
    except RPCError as err:  # it resumed on its own limit and finished: nothing to do
        log.debug("Resume of %s not delivered: %s", handle.id, err.message)


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

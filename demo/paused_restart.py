"""The presenter's paused restart: the story reads Event History while no Worker is alive.

    paused_worker_restart -> PausedRestartWorker(PauseRequest) on the shared control queue
        -> kill_worker on the host's queue (taken within a second, or refused): SIGKILL, held down
        -> Update worker_down returns -> while_down() -> Signal resume (or the pause's limit)
        -> start_worker on the killer's host queue: standby promoted, sticky reset, polling

A control Workflow of its own, beside the product's RestartWorker, on the same control queues:
the supervisor's half is demo/worker_hold.py, which the composition root hands each supervisor.
Its kill is ordered as RestartWorker's restart is (worker.control): taken at once or never, and
refused by a supervisor when it is too old, so a host that is gone is refused in a second and a
replacement never kills its fresh Worker on its predecessor's order.
Importable without side effects: the workflow sandbox re-imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

with workflow.unsafe.imports_passed_through():  # the sandbox need not re-import process code
    from worker.control import (
        ORDER_EXPIRES_PATCH,
        PICKUP_TIMEOUT,
        REQUEST_TIMEOUT,
        RESTART_ACTIVITY_TIMEOUT,
        RestartReport,
        host_control_queue,
        not_answered,
    )
    from worker.lifecycle import to_the_end

log = logging.getLogger(__name__)

PAUSED_RESTART_WORKFLOW = "PausedRestartWorker"
KILL_ACTIVITY = "kill_worker"
START_ACTIVITY = "start_worker"
# The longest a paused restart holds a Worker down. The supervisor enforces it on its own clock,
# so a presenter's bot that dies mid-pause (its resume never sent) leaves the Worker down for at
# most this long; a minute is ample to read a conversation's history and show it.
PAUSE_LIMIT = timedelta(seconds=60)


class PauseRequest(BaseModel):
    """Hold the killed Worker down until resumed, for at most `max_seconds` (the supervisor's
    own limit, PAUSE_LIMIT unless it was built with another, caps it too)."""

    max_seconds: float = Field(default=PAUSE_LIMIT.total_seconds(), gt=0)
    host: str | None = None  # None: any supervisor's Worker
    # The supervisor seen alive on `host` (its identity): no other obeys (worker.control).
    supervisor: str | None = None
    # When the request's Workflow started (seconds since the epoch): set by the Workflow for
    # kill_worker, whose supervisor refuses an order older than worker.control.ORDER_MAX_AGE.
    requested_at: float | None = None


class WorkerDown(BaseModel):
    """The first half of a paused restart, done: the old Worker is dead and none polls."""

    old_pid: int | None
    host: str
    supervisor_pid: int
    # The killing supervisor's own control queue: the resume must reach it, not any supervisor.
    resume_queue: str
    # It restarts the Worker by itself after this long, resumed or not.
    held_seconds: float


@workflow.defn(name=PAUSED_RESTART_WORKFLOW)
class PausedRestartWorker:
    """One paused restart of the Worker process, executed by supervisors' control Workers."""

    def __init__(self) -> None:
        self._down: WorkerDown | None = None  # EXECUTION STATE: the kill is done
        self._kill_failed = False  # EXECUTION STATE
        self._resumed = False  # EXECUTION STATE: the caller has read what it wanted

    @workflow.run
    async def run(self, pause: PauseRequest) -> RestartReport:
        try:
            if workflow.patched(ORDER_EXPIRES_PATCH):
                info = workflow.info()
                order = pause.model_copy(update={"requested_at": info.start_time.timestamp()})
                queue = info.task_queue
                self._down = await workflow.execute_activity(  # EXTERNAL EFFECT: SIGKILL, held
                    KILL_ACTIVITY,
                    order,
                    task_queue=host_control_queue(queue, pause.host) if pause.host else queue,
                    # Taken at once or never, as RestartWorker's restart (worker.control).
                    schedule_to_start_timeout=PICKUP_TIMEOUT,
                    start_to_close_timeout=RESTART_ACTIVITY_TIMEOUT,
                    # Not repeated: a retry would kill the Worker a second time.
                    retry_policy=RetryPolicy(maximum_attempts=1),
                    result_type=WorkerDown,
                )
            else:  # a paused restart requested before orders expired: replayed as it ran
                self._down = await workflow.execute_activity(  # EXTERNAL EFFECT: SIGKILL, held
                    KILL_ACTIVITY,
                    pause,
                    start_to_close_timeout=RESTART_ACTIVITY_TIMEOUT,
                    retry_policy=RetryPolicy(maximum_attempts=1),
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


async def paused_worker_restart(
    client: Client,
    control_task_queue: str,
    host: str | None,
    while_down: Callable[[], Awaitable[None]],
    *,
    supervisor: str | None = None,
    max_seconds: float = PAUSE_LIMIT.total_seconds(),
) -> RestartReport:
    """Like worker.control.request_worker_restart, with `while_down` awaited after the old Worker
    is dead and before a new one polls (`supervisor`: the one seen alive on `host`, as for
    request_worker_restart): no Worker of that supervisor is alive while it runs, for
    at most `max_seconds` (and the supervisor's own limit): past it the Worker comes back
    regardless.

    If `while_down` raises, the Worker is resumed (and waited for) and the error propagates.
    Raises worker.control.NoSupervisorAnswers if no supervisor took the kill while it was meant
    (`host` does not answer), temporalio.client.WorkflowFailureError if the kill or the restart
    failed.
    """
    budget = REQUEST_TIMEOUT.total_seconds() + max_seconds
    handle = await client.start_workflow(
        PausedRestartWorker.run,
        PauseRequest(max_seconds=max_seconds, host=host, supervisor=supervisor),
        id=f"restart-worker-{uuid.uuid4().hex}",
        # Any live supervisor runs the request; the kill goes to `host`'s own queue.
        task_queue=control_task_queue,
        execution_timeout=timedelta(seconds=budget),
    )
    try:
        down = await asyncio.wait_for(
            handle.execute_update(PausedRestartWorker.worker_down), budget
        )
    except (WorkflowUpdateFailedError, RPCError) as err:
        # The kill failed (or no supervisor took it): the Workflow's failure says why.
        try:
            await asyncio.wait_for(handle.result(), budget)
        except WorkflowFailureError as failed:
            raise not_answered(failed, host) or failed from failed
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


async def _resume(handle: WorkflowHandle[PausedRestartWorker, RestartReport]) -> None:
    try:
        await handle.signal(PausedRestartWorker.resume)
    except RPCError as err:  # it resumed on its own limit and finished: nothing to do
        log.debug("Resume of %s not delivered: %s", handle.id, err.message)

"""The control plane of the Worker process: its identity, the restart request, the sticky reset.

Importable without side effects (the workflow sandbox re-imports it for RestartWorker). A
`/crash-worker` request travels through Temporal, so it reaches a supervisor on this host or
another: every supervisor polls the control task queue (any of them takes a request there) and
its host's own, `<control queue>@<host>` (`/crash-worker <host>`). Which hosts have a supervisor
is Temporal's answer too: the pollers it lists on the control queue (worker.pollers).

    /crash-worker [host] -> worker.pollers.supervisor_hosts (DescribeTaskQueue)
        -> RestartWorker on the queue
        -> that supervisor's restart_worker Activity: SIGKILL, sticky reset, new Worker polling

The presenter's paused restart (no Worker alive while the story reads Event History) is a control
Workflow of the demo's own (demo/paused_restart.py), served beside this one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Collection
from datetime import timedelta

from pydantic import BaseModel
from temporalio import workflow
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import (
    GetWorkflowExecutionHistoryReverseRequest,
    ResetStickyTaskQueueRequest,
)
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.service import RPCError

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
# A request's whole life: no supervisor on the queue must not leave the caller waiting for ever.
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
    # Of seconds_to_ready, how long the Worker was held down on purpose (while_down).
    seconds_paused: float = 0.0


@workflow.defn(name=RESTART_WORKFLOW)
class RestartWorker:
    """One restart of the Worker process, executed by supervisors' control Workers."""

    @workflow.run
    async def run(self) -> RestartReport:
        return await workflow.execute_activity(  # EXTERNAL EFFECT: SIGKILL and a new Worker
            RESTART_ACTIVITY,
            start_to_close_timeout=RESTART_ACTIVITY_TIMEOUT,
            # A crash request is not repeated: a retry would kill the Worker a second time.
            retry_policy=RetryPolicy(maximum_attempts=1),
            result_type=RestartReport,
        )


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

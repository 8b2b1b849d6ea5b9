"""Who polls a task queue, asked of Temporal.

    DescribeTaskQueue -> workflow_pollers -> worker_is_polling | supervisor_hosts | other_workers

Temporal, not a process list, says whether a Worker can make progress: a child counts as ready
only once a poller with its identity is listed, and a host has a supervisor only while its control
Worker polls.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass
from datetime import timedelta

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import PollerInfo, TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from worker.lifecycle import alive

_DESCRIBE_TIMEOUT = timedelta(seconds=5)
# Temporal lists a poller for minutes after its last poll; a live one polls again within about a
# minute (the long-poll timeout), so one not seen for longer is gone.
_POLLER_SEEN_WITHIN = 120.0
# "refund-bot-worker-4242@host" (ours), "4242@host" (the SDKs' default identity).
_IDENTITY = re.compile(r"(\d+)@([^@\s]+)")
_SUPERVISOR = re.compile(r"^refund-bot-supervisor-\d+@([^@\s]+)$")


async def workflow_pollers(client: Client, namespace: str, task_queue: str) -> list[PollerInfo]:
    """The workflow-task pollers Temporal lists on `task_queue` (recent ones, maybe not live)."""
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=namespace,
            task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        ),
        # Bounded: a slow server must not hold a start-up deadline or a status line for long.
        timeout=_DESCRIBE_TIMEOUT,
    )
    return list(response.pollers)


async def worker_is_polling(client: Client, namespace: str, task_queue: str, identity: str) -> bool:
    """Whether Temporal lists a workflow-task poller with `identity` on `task_queue`."""
    pollers = await workflow_pollers(client, namespace, task_queue)
    return any(poller.identity == identity for poller in pollers)


async def supervisor_hosts(client: Client, namespace: str, control_task_queue: str) -> list[str]:
    """The hosts whose Worker supervisors poll `control_task_queue` now, sorted."""
    now = time.time()
    hosts = set()
    for poller in await workflow_pollers(client, namespace, control_task_queue):
        match = _SUPERVISOR.match(poller.identity)
        if match and now - poller.last_access_time.ToSeconds() <= _POLLER_SEEN_WITHIN:
            hosts.add(match.group(1))
    return sorted(hosts)


@dataclass(frozen=True)
class OtherWorker:
    """A Worker of another process on the task queue, as its poller identity names it."""

    identity: str
    host: str | None
    pid: int | None
    seconds_since_poll: float

    def __str__(self) -> str:
        where = f"pid {self.pid} on {self.host}" if self.pid is not None else "unknown pid"
        return f"{where} ({self.identity!r}, polled {self.seconds_since_poll:.0f} s ago)"


async def other_workers(
    client: Client, namespace: str, task_queue: str, *, this_host: str | None = None
) -> list[OtherWorker]:
    """The Workers of other processes that poll `task_queue` now.

    Temporal keeps listing a poller for minutes after it stopped, so a poller not seen lately, or
    one on this host whose process is gone (an earlier run's Worker), does not count.
    """
    this_host = this_host or socket.gethostname()
    now = time.time()
    found = []
    for poller in await workflow_pollers(client, namespace, task_queue):
        ago = max(0.0, now - poller.last_access_time.ToSeconds())
        match = _IDENTITY.search(poller.identity)
        pid, host = (int(match.group(1)), match.group(2)) if match else (None, None)
        if ago > _POLLER_SEEN_WITHIN or (host == this_host and pid is not None and not alive(pid)):
            continue
        found.append(OtherWorker(poller.identity, host, pid, ago))
    return found

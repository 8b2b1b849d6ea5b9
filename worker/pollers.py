"""Who polls a task queue, and who is alive there now, asked of Temporal.

    DescribeTaskQueue -> workflow_pollers -> worker_is_polling (a new child's first poll)
    ListWorkers (each Worker's heartbeat) -> heartbeats -> live_workers | other_workers
                                                        -> supervisors -> live_supervisors,
                                                           supervisor_hosts

Temporal, not a process list, says whether a Worker can make progress: a child counts as ready
only once a poller with its identity is listed. Whether a Worker is alive *now* is another
question: Temporal keeps listing a poller for a minute or more after its process was SIGKILLed or
its host lost, and an idle live poller is seen only once a minute (its long poll). So liveness is
read from the Workers' own heartbeats, which every refund-bot process sends every second
(agent.temporal_client.WORKER_HEARTBEAT): a Worker whose last heartbeat is older than
HEARTBEAT_FRESH is gone, on whatever host it ran. A server that keeps no heartbeats (ListWorkers
refused, or none recorded at all) leaves the poller list, as before; a restart request to a host
that is gone is still refused within a second there (worker.control's schedule-to-start).
"""

from __future__ import annotations

import logging
import re
import socket
import time
from dataclasses import dataclass
from datetime import timedelta

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType, WorkerStatus
from temporalio.api.taskqueue.v1 import PollerInfo, TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, ListWorkersRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from worker.lifecycle import alive

log = logging.getLogger(__name__)

_DESCRIBE_TIMEOUT = timedelta(seconds=5)
# Temporal lists a poller for minutes after its last poll; a live one polls again within about a
# minute (the long-poll timeout), so one not seen for longer is gone. Used only where Temporal
# keeps no heartbeats.
_POLLER_SEEN_WITHIN = 120.0
# A live Worker's last heartbeat reads up to about 2 s old (one a second, and Temporal's record of
# it lags); older than this, the process is dead, or its host lost or cut off.
HEARTBEAT_FRESH = 4.0
# Workers a ListWorkers page holds; a deployment has a handful per queue.
_PAGE = 200
# The server said it will not list Workers: it keeps no heartbeats (an older server, or a cluster
# with them turned off).
_NOT_KEPT = (
    RPCStatusCode.UNIMPLEMENTED,
    RPCStatusCode.PERMISSION_DENIED,
    RPCStatusCode.FAILED_PRECONDITION,
)
# "refund-bot-worker-4242@host" (ours), "4242@host" (the SDKs' default identity).
_IDENTITY = re.compile(r"(\d+)@([^@\s]+)")
_SUPERVISOR = re.compile(r"^refund-bot-supervisor-\d+@([^@\s]+)$")
_WORKER = re.compile(r"^refund-bot-worker-(\d+)@([^@\s]+)$")


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


@dataclass(frozen=True)
class Heartbeat:
    """A Worker Temporal has heard from, as its last heartbeat tells."""

    identity: str
    seconds_ago: float
    # Running, and beating at its own pace now: refund-bot's Workers beat every second, another
    # SDK's every minute by default (elapsed_since_last_heartbeat is the gap before the last one).
    alive: bool


async def heartbeats(client: Client, namespace: str, task_queue: str) -> list[Heartbeat] | None:
    """Every Worker on `task_queue` Temporal has a heartbeat record of, alive now or not (stopped,
    or its heartbeats stale); None when Temporal keeps no heartbeats to read (see the module)."""
    query = f"TaskQueue = '{task_queue}'"
    try:
        response = await client.workflow_service.list_workers(
            ListWorkersRequest(namespace=namespace, page_size=_PAGE, query=query),
            timeout=_DESCRIBE_TIMEOUT,
        )
        if not response.workers_info:
            # Nothing on this queue: none alive, or none recorded anywhere (heartbeats off)?
            anywhere = await client.workflow_service.list_workers(
                ListWorkersRequest(namespace=namespace, page_size=1), timeout=_DESCRIBE_TIMEOUT
            )
            if not anywhere.workers_info:
                return None
    except RPCError as err:
        if err.status not in _NOT_KEPT:
            raise
        log.debug("Temporal lists no Worker heartbeats (%s): reading its pollers", err.message)
        return None
    now = time.time()
    found = []
    for info in response.workers_info:
        beat = info.worker_heartbeat
        ago = max(0.0, now - beat.heartbeat_time.ToSeconds())
        pace = beat.elapsed_since_last_heartbeat.ToTimedelta().total_seconds()
        running = beat.status == WorkerStatus.WORKER_STATUS_RUNNING
        fresh = ago <= max(HEARTBEAT_FRESH, 3 * pace)
        found.append(Heartbeat(beat.worker_identity, ago, running and fresh))
    return found


async def live_workers(client: Client, namespace: str, task_queue: str) -> dict[str, float] | None:
    """The Workers on `task_queue` whose heartbeat is fresh, running: identity -> seconds since
    their last heartbeat. None when Temporal keeps no heartbeats to read (see the module)."""
    beats = await heartbeats(client, namespace, task_queue)
    if beats is None:
        return None
    found: dict[str, float] = {}
    for beat in beats:
        if beat.alive:
            found[beat.identity] = min(beat.seconds_ago, found.get(beat.identity, beat.seconds_ago))
    return found


async def gone_workers(client: Client, namespace: str, task_queue: str) -> list[str] | None:
    """The identities of Workers on `task_queue` that Temporal still lists as running but whose
    heartbeat is older than HEARTBEAT_FRESH (SIGKILLed, or their host lost) and that no fresh
    heartbeat of the same identity contradicts; None when Temporal keeps no heartbeats. A Worker
    that stopped gracefully is listed as shut down: it released its own sticky queue."""
    query = f"TaskQueue = '{task_queue}'"
    try:
        response = await client.workflow_service.list_workers(
            ListWorkersRequest(namespace=namespace, page_size=_PAGE, query=query),
            timeout=_DESCRIBE_TIMEOUT,
        )
    except RPCError as err:
        if err.status not in _NOT_KEPT:
            raise
        return None
    now = time.time()
    stale: set[str] = set()
    fresh: set[str] = set()
    for info in response.workers_info:
        beat = info.worker_heartbeat
        if beat.status != WorkerStatus.WORKER_STATUS_RUNNING:
            continue
        ago = now - beat.heartbeat_time.ToSeconds()
        (fresh if ago <= HEARTBEAT_FRESH else stale).add(beat.worker_identity)
    return sorted(stale - fresh)


async def supervisors(
    client: Client, namespace: str, control_task_queue: str
) -> dict[str, str | None] | None:
    """Each host with a supervisor's heartbeat on record -> the identity of the one alive there
    now (the freshest, should a replacement and its dead predecessor both be listed), or None: it
    heartbeated and stopped, the host is lost. A host never heard from is not listed (Temporal
    drops a dead Worker's record within seconds, and a process whose heartbeat task failed at
    start-up is never heard from): the restart order's pickup bound decides there. None when
    Temporal keeps no heartbeats to read."""
    beats = await heartbeats(client, namespace, control_task_queue)
    if beats is None:
        return None
    found: dict[str, str | None] = {}
    for beat in sorted(beats, key=lambda beat: -beat.seconds_ago):  # the freshest last
        if match := _SUPERVISOR.match(beat.identity):
            host = match.group(1)
            if beat.alive:
                found[host] = beat.identity
            else:
                found.setdefault(host, None)
    return found


async def live_supervisors(
    client: Client, namespace: str, control_task_queue: str
) -> dict[str, str] | None:
    """Each host with a supervisor alive on `control_task_queue` now -> that supervisor's identity;
    None when Temporal keeps no heartbeats to read."""
    known = await supervisors(client, namespace, control_task_queue)
    if known is None:
        return None
    return {host: identity for host, identity in known.items() if identity is not None}


async def gone_here(client: Client, namespace: str, task_queue: str, identity: str) -> list[str]:
    """The refund-bot Workers of this host (the one `identity` names) that polled `task_queue`
    lately and whose process no longer runs here, and `identity` itself: a container restarted
    after a SIGKILL gives its Worker the pid, hence the identity, it had. The pid is read on this
    machine, so a host's name (REFUND_BOT_HOST) must name one machine."""
    match = _WORKER.match(identity)
    if match is None:
        return [identity]
    own_pid, host = int(match.group(1)), match.group(2)
    now = time.time()
    found = {identity}
    for poller in await workflow_pollers(client, namespace, task_queue):
        other = _WORKER.match(poller.identity)
        if other is None or other.group(2) != host or int(other.group(1)) == own_pid:
            continue
        recent = now - poller.last_access_time.ToSeconds() <= _POLLER_SEEN_WITHIN
        if recent and not alive(int(other.group(1))):
            found.add(poller.identity)
    return sorted(found)


async def supervisor_hosts(client: Client, namespace: str, control_task_queue: str) -> list[str]:
    """The hosts whose Worker supervisors are alive on `control_task_queue` now, sorted."""
    live = await live_supervisors(client, namespace, control_task_queue)
    if live is not None:
        return sorted(live)
    now = time.time()
    identities = [
        poller.identity
        for poller in await workflow_pollers(client, namespace, control_task_queue)
        if now - poller.last_access_time.ToSeconds() <= _POLLER_SEEN_WITHIN
    ]
    return sorted({m.group(1) for i in identities if (m := _SUPERVISOR.match(i))})


@dataclass(frozen=True)
class OtherWorker:
    """A Worker of another process on the task queue, as its identity names it."""

    identity: str
    host: str | None
    pid: int | None
    # Since its last heartbeat (or, where Temporal keeps none, its last poll).
    seconds_since_seen: float

    def __str__(self) -> str:
        where = f"pid {self.pid} on {self.host}" if self.pid is not None else "unknown pid"
        return f"{where} ({self.identity!r}, seen {self.seconds_since_seen:.0f} s ago)"


async def other_workers(
    client: Client,
    namespace: str,
    task_queue: str,
    *,
    this_host: str | None = None,
    unheard_polls: bool = False,
) -> list[OtherWorker]:
    """The Workers of other processes alive on `task_queue` now: their heartbeat is fresh.

    Where Temporal keeps no heartbeats, its poller list: a poller not seen lately does not count,
    nor one whose process is gone on this machine (named by its hostname or `this_host`, this
    process's REFUND_BOT_HOST); a dead Worker of another machine counts until its poll ages out.
    `unheard_polls`: count too the recent pollers Temporal has no heartbeat record of (a Worker
    whose heartbeats never reached it; but also one dead for a few seconds, whose record Temporal
    has already dropped): for a warning, never for a decision.
    """
    beats = await heartbeats(client, namespace, task_queue)
    found = {
        beat.identity: _other(beat.identity, beat.seconds_ago)
        for beat in sorted(beats or (), key=lambda beat: -beat.seconds_ago)  # the freshest last
        if beat.alive
    }
    if beats is not None and not unheard_polls:
        return [found[identity] for identity in sorted(found)]
    heard = {beat.identity for beat in beats or ()}
    here = {socket.gethostname(), *([this_host] if this_host else [])}
    now = time.time()
    for poller in await workflow_pollers(client, namespace, task_queue):
        if poller.identity in heard:
            continue  # its heartbeats say whether it is alive
        worker = _other(poller.identity, max(0.0, now - poller.last_access_time.ToSeconds()))
        gone_here = worker.host in here and worker.pid is not None and not alive(worker.pid)
        if worker.seconds_since_seen > _POLLER_SEEN_WITHIN or gone_here:
            continue
        found.setdefault(worker.identity, worker)
    return [found[identity] for identity in sorted(found)]


def _other(identity: str, ago: float) -> OtherWorker:
    match = _IDENTITY.search(identity)
    pid, host = (int(match.group(1)), match.group(2)) if match else (None, None)
    return OtherWorker(identity, host, pid, ago)

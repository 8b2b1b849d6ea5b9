"""The Worker supervisor: runs the Worker as a child process so it can really die, and restarts it.

A child counts as ready only when Temporal itself reports a poller with the child's identity on the
workflow task queue, so "ready" means "conversations can make progress", not "the process exists".
The supervisor also serves the control task queues, where `/crash-worker` requests arrive: the
shared one and its host's own (worker.control), so a presenter can name the host.

`workers` children poll at once (REFUND_BOT_WORKERS; default 1). With two, a Worker that dies
takes only its own conversations' caches with it: the sticky reset sends only the conversations it
held to the other Workers, which replay them, while the survivor's carry on from its cache.

A warm standby (worker/standby.py) waits beside the active children: when the active child dies
(/crash-worker, or killed unannounced) the standby is told to poll, and a new standby is prepared
once it does.

    active dies -> standby told "go" + sticky reset (of what it held) -> standby polls
        -> new standby spawned
    /crash-worker -> every active SIGKILLed -> standby + new children -> sticky reset of all

A restart can wait: `restart(kill=True, while_down=...)` awaits `while_down` once the old Worker is
dead and before a new one polls (the presenter's story reads Event History there). More work for
the control queues (the presenter's paused restart, demo/) comes from whoever builds the
supervisor, as a `ControlService`.

Each child is tied to the supervisor's life (worker.lifecycle.spawn_child): if the supervisor's
process dies, even by SIGKILL, its Worker exits too. Before the first child starts, Workers of other
processes already polling the task queue are reported in one line: this one joins them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from agent.settings import TemporalSettings
from agent.temporal_client import connect
from worker.control import (
    RESTART_ACTIVITY,
    RestartOrder,
    RestartReport,
    RestartWorker,
    heartbeating,
    host_control_queue,
    refuse_stale,
    reset_sticky_queues,
    supervisor_identity,
    worker_identity,
)
from worker.lifecycle import spawn_child, terminate, to_the_end
from worker.pollers import (
    gone_workers,
    live_workers,
    other_workers,
    worker_is_polling,
    workflow_pollers,
)
from worker.server import log_tail
from worker.settings import WORKER_SECRETS, child_environment
from worker.standby import WarmStandby

log = logging.getLogger(__name__)

DEFAULT_COMMAND: tuple[str, ...] = (sys.executable, "-m", "refund_bot", "worker")
# Unexpected deaths within this window count towards the backoff, so a crash loop slows down.
_DEATH_WINDOW = 60.0
_BACKOFF_BASE = 0.5
_BACKOFF_MAX = 10.0
_POLL_INTERVAL = 0.1
# The start-up report of other Workers asks this often when the server says it is busy.
_REPORT_ATTEMPTS = 4
_BUSY = (
    RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.DEADLINE_EXCEEDED,
)


class WorkerStartError(RuntimeError):
    """The Worker child exited, or did not poll its task queue, before the deadline."""


class ControlService(Protocol):
    """More work for a supervisor's control queues, served beside RestartWorker by its control
    Workers (the composition root adds the presenter's paused restart this way)."""

    @property
    def workflows(self) -> Sequence[type]: ...

    @property
    def activities(self) -> Sequence[Callable[..., Any]]: ...


class ControlActivities:
    """The control queues' Activity, bound to the supervisor that serves them."""

    def __init__(self, supervisor: WorkerSupervisor) -> None:
        self._supervisor = supervisor

    @activity.defn(name=RESTART_ACTIVITY)
    async def restart_worker(self, order: RestartOrder | None = None) -> RestartReport:
        # None: a request from before orders expired (a bot of the previous release).
        if order is not None:
            refuse_stale(order, self._supervisor.host)
        # Heartbeats say this host is still there while it restarts (worker.control).
        return await heartbeating(self._supervisor.restart(kill=True))


class WorkerSupervisor:
    """Starts the Worker child, restarts it on request or when it dies, stops it on the way out.

    `client` must use agent.temporal_client's data converter; without one, `start()` connects with
    `connect(settings)`. `env` is added to the child's environment on top of this process's
    environment (less the secrets a Worker does not use: worker.settings.WORKER_SECRETS) and the
    TEMPORAL_ADDRESS / _NAMESPACE / _TASK_QUEUE derived from `settings`.
    `host` is the name this host goes by (REFUND_BOT_HOST; default the machine's hostname): in
    the child's identity, the host control queue and the restart reports. `workers`: how many
    children poll at once (REFUND_BOT_WORKERS); a restart replaces them all, a death only itself.
    `control`: more work for the control queues, built for this supervisor.
    """

    def __init__(
        self,
        settings: TemporalSettings,
        command: Sequence[str] | None = None,
        *,
        client: Client | None = None,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        ready_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        serve_control: bool = True,
        reset_sticky: bool = True,
        host: str | None = None,
        standby: bool | None = None,
        workers: int = 1,
        control: Callable[[WorkerSupervisor], ControlService] | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers={workers}: a supervisor runs at least one Worker")
        self.settings = settings
        self.command = list(command or DEFAULT_COMMAND)
        self.env = dict(env or {})
        self.log_path = log_path
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.serve_control = serve_control
        # Off only to measure what the reset buys (bench/crash_drill.py).
        self.reset_sticky = reset_sticky
        self.host = host or socket.gethostname()
        # Only the real Worker (`refund-bot worker`) takes --standby and --metrics-slot; a test's
        # stand-in command takes neither.
        self._real_worker = command is None
        self.standby = self._real_worker if standby is None else standby
        self.workers = workers
        self._more_control = control(self) if control is not None else None
        self.last_report: RestartReport | None = None
        self._client = client
        self._procs: list[asyncio.subprocess.Process] = []  # EXECUTION STATE: the polling ones
        self._standby = WarmStandby(lambda: self._spawn(standby=True))
        # EXECUTION STATE: each live child's slot (`--metrics-slot`: its metrics port is
        # WORKER_METRICS_ADDRESS's plus the slot). A new child takes the lowest free one, so a
        # host's Workers and standby always serve metrics on the same workers + 1 ports.
        self._slots: dict[int, int] = {}
        self._lock = asyncio.Lock()
        self._stopping = True
        self._deaths: collections.deque[float] = collections.deque()
        # Each child's watcher, and a restart's later Workers waiting to poll: cancelled by stop().
        self._background: set[asyncio.Task[None]] = set()
        self._control: list[Worker] = []
        self._control_tasks: list[asyncio.Task[None]] = []

    @property
    def pid(self) -> int | None:
        """The first current child's pid (it may have just died; see `running`)."""
        return self._procs[0].pid if self._procs else None

    @property
    def pids(self) -> tuple[int, ...]:
        """Every current child's pid, first `pid`."""
        return tuple(proc.pid for proc in self._procs)

    @property
    def standby_pid(self) -> int | None:
        """The warm standby's pid, while one waits (see `start`)."""
        return self._standby.pid

    async def polling(self) -> bool:
        """Whether Temporal lists a workflow-task poller for every current child (one request)."""
        identities = {worker_identity(pid, self.host) for pid in self.pids}
        listed = await workflow_pollers(
            self.client, self.settings.namespace, self.settings.task_queue
        )
        return bool(identities) and identities <= {poller.identity for poller in listed}

    @property
    def running(self) -> bool:
        """Whether all `workers` children are alive."""
        procs = self._procs
        return len(procs) == self.workers and all(p.returncode is None for p in procs)

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("WorkerSupervisor.start() has not connected yet")
        return self._client

    async def __aenter__(self) -> WorkerSupervisor:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Serve the control queue, start the child and wait until it polls."""
        if not self._stopping:
            raise RuntimeError("WorkerSupervisor already started")
        if self._client is None:
            self._client = await connect(self.settings)
        self._stopping = False
        try:
            if self.serve_control:
                # Any supervisor takes a request on the shared queue; only this one on its host's.
                shared = self.settings.control_task_queue
                more = self._more_control
                for queue in (shared, host_control_queue(shared, self.host)):
                    control = Worker(
                        self._client,
                        task_queue=queue,
                        identity=supervisor_identity(self.host),
                        workflows=[RestartWorker, *(more.workflows if more else ())],
                        activities=[
                            ControlActivities(self).restart_worker,
                            *(more.activities if more else ()),
                        ],
                    )
                    task = asyncio.create_task(control.run())
                    task.add_done_callback(self._control_done)
                    self._control.append(control)
                    self._control_tasks.append(task)
            async with self._lock:
                started = time.monotonic()
                await self._report_other_workers()
                # A previous run's Worker may have died with conversations still sticky to it.
                await self._release_gone()
                for _ in range(self.workers):
                    self._procs.append(await self._spawn())
                procs = list(self._procs)
                await asyncio.gather(
                    *(self._wait_ready(proc) for proc in procs), self._wait_control_alive()
                )
                log.info(
                    "Worker pid %s polling %r (%.2f s)",
                    ", ".join(str(p.pid) for p in procs), self.settings.task_queue,
                    time.monotonic() - started,
                )  # fmt: skip
                # Only now: its start-up would have competed with the first child's for the CPU.
                await self._prepare_standby()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop serving the control queue and stop the child (SIGTERM, then SIGKILL), to the end
        even if the calling task is cancelled meanwhile."""
        await to_the_end(self._stop())

    async def _stop(self) -> None:
        self._stopping = True
        # A restart's while_down among them: a held restart gives the lock up at once.
        for task in list(self._background):
            task.cancel()
        controls, self._control = self._control, []
        tasks, self._control_tasks = self._control_tasks, []
        for control in controls:
            with contextlib.suppress(Exception):
                await control.shutdown()
        for task in tasks:
            with contextlib.suppress(Exception):  # already logged by _control_done
                await task
        async with self._lock:
            standby = self._standby.take()
            procs, self._procs = self._procs, []
            stops = [*procs, *([standby] if standby is not None else [])]
            codes = await asyncio.gather(*(terminate(p, self.stop_timeout) for p in stops))
            for stopped, code in zip(stops, codes, strict=True):
                log.info("Worker pid %s stopped with %s", stopped.pid, code)

    async def restart(
        self, kill: bool = True, while_down: Callable[[], Awaitable[None]] | None = None
    ) -> RestartReport:
        """Replace the child: SIGKILL it (kill=False: stop it gracefully), start a new one.

        `while_down` runs after the old child is dead and before the new one starts: the demo
        reads what survives from Event History there, while no Worker is alive. A stop() does not
        wait for it: it is cancelled, and this restart with it.
        """
        async with self._lock:
            # Checked under the lock: a stop() may have begun while this waited for it.
            if self._stopping:
                raise RuntimeError("WorkerSupervisor is not running")
            return await self._replace_locked(kill=kill, while_down=while_down)

    async def _replace_locked(
        self,
        kill: bool,
        while_down: Callable[[], Awaitable[None]] | None = None,
        dead: asyncio.subprocess.Process | None = None,
    ) -> RestartReport:
        """Replace every child (a restart), or only `dead` (a death: the others poll on)."""
        started = time.monotonic()
        paused = 0.0
        olds = [dead] if dead is not None else self._procs
        # Out of the list first: their watchers now know these deaths are deliberate.
        self._procs = [p for p in self._procs if p not in olds]
        old_pid = olds[0].pid if olds else None
        for old in olds:
            if kill:
                with contextlib.suppress(ProcessLookupError):
                    old.kill()
                await old.wait()
            else:
                await terminate(old, self.stop_timeout)
        if while_down is not None:
            waiting = asyncio.ensure_future(while_down())
            self._background.add(waiting)  # stop() cancels it
            waiting.add_done_callback(self._background.discard)
            try:
                await waiting
            finally:
                waiting.cancel()  # this restart was cancelled: so is the wait
            paused = time.monotonic() - started
        # The dead Workers' conversations are reset while the standby starts its pollers, so
        # neither waits for the other. Conversations held by a surviving Worker stay with it.
        self._release_soon({worker_identity(old.pid, self.host) for old in olds})
        new: list[asyncio.subprocess.Process] = []
        while len(self._procs) < self.workers:
            promoted = None if new else await self._standby.promote()
            proc = promoted or await self._spawn()
            self._procs.append(proc)  # at once: a death from here on is its watcher's to handle
            new.append(proc)
        # Conversations go on once the first (the promoted standby) polls; the others start cold
        # and join when ready, without holding up the report or the lock.
        proc = new[0]
        await self._wait_ready(proc)
        for later in new[1:]:
            task = asyncio.create_task(self._ready_later(later))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        report = RestartReport(
            old_pid=old_pid,
            new_pid=proc.pid,
            seconds_to_ready=round(time.monotonic() - started, 3),
            host=self.host,
            supervisor_pid=os.getpid(),
            seconds_paused=round(paused, 3),
        )
        self.last_report = report
        log.info(
            "Worker restarted: pid %s -> %s, polling after %.2f s",
            old_pid, proc.pid, report.seconds_to_ready,
        )  # fmt: skip
        await self._prepare_standby()
        return report

    async def _prepare_standby(self) -> None:
        if self.standby and not self._stopping:
            await self._standby.prepare()

    def _command(self, slot: int, standby: bool) -> list[str]:
        slotted = [f"--metrics-slot={slot}"] if self._real_worker else []
        return [*self.command, *slotted, *(["--standby"] if standby else [])]

    def _free_slot(self) -> int:
        procs = (*self._procs, self._standby.proc)
        live = [p for p in procs if p is not None and p.returncode is None]
        taken = {self._slots.get(p.pid) for p in live}
        return next(slot for slot in range(len(live) + 1) if slot not in taken)

    async def _spawn(self, standby: bool = False) -> asyncio.subprocess.Process:
        slot = self._free_slot()
        env = {
            # Only the secrets a Worker uses: not the chat platforms' inbound ones, not the codec
            # server's token (worker.settings).
            **child_environment(WORKER_SECRETS),
            "TEMPORAL_ADDRESS": self.settings.address,
            "TEMPORAL_NAMESPACE": self.settings.namespace,
            "TEMPORAL_TASK_QUEUE": self.settings.task_queue,
            "REFUND_BOT_HOST": self.host,  # the child's identity names the same host
            **self.env,
        }
        out = self.log_path.open("ab") if self.log_path else None
        try:
            # Own session: a terminal Ctrl-C reaches only refund-bot, which then stops the child
            # in order, and never reads as an unexpected death to restart. If this process dies
            # first, SIGKILL (and the lifeline): the agent is built to survive a Worker's death.
            proc = await spawn_child(
                self._command(slot, standby),
                on_parent_death=signal.SIGKILL,
                lifeline=True,
                env=env,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT if out else None,
                # A standby's stdin is how it is told to poll; end of file lets it go.
                stdin=asyncio.subprocess.PIPE if standby else asyncio.subprocess.DEVNULL,
            )
        finally:
            if out:
                out.close()
        self._slots[proc.pid] = slot
        task = asyncio.create_task(self._watch(proc))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return proc

    async def _wait_ready(self, proc: asyncio.subprocess.Process) -> None:
        identity = worker_identity(proc.pid, self.host)
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if proc.returncode is not None:
                raise WorkerStartError(
                    f"Worker pid {proc.pid} exited with {proc.returncode} before polling"
                    + self._last_words()
                )
            try:
                if await worker_is_polling(
                    self.client, self.settings.namespace, self.settings.task_queue, identity
                ):
                    return
            except Exception as err:  # a transient RPC failure is not a verdict on the child
                log.debug("DescribeTaskQueue failed: %s", err)
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()  # its watcher restarts it, with backoff
                raise WorkerStartError(
                    f"Worker pid {proc.pid} did not poll {self.settings.task_queue!r} "
                    f"within {self.ready_timeout:.0f} s"
                )
            await asyncio.sleep(_POLL_INTERVAL)

    def _last_words(self) -> str:
        """The last line the Worker wrote to its log (its reason, when it stops on purpose)."""
        if self.log_path is None:  # it wrote to this process's own output, already shown
            return ""
        lines = log_tail(self.log_path, lines=1)
        return f": {lines}" if lines.strip() and lines != "(no log)" else ""

    async def _wait_control_alive(self) -> None:
        """Until Temporal has this supervisor's first heartbeat, so that a /crash-worker made
        once it started finds it alive (worker.pollers); a second at most. A server that keeps
        no heartbeats, or one slow to record it, does not hold the start up: it is said."""
        if not self.serve_control:
            return
        identity = supervisor_identity(self.host)
        queue = self.settings.control_task_queue
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            try:
                live = await live_workers(self.client, self.settings.namespace, queue)
            except Exception as err:  # a transient RPC failure is not a verdict
                log.debug("ListWorkers failed: %s", err)
            else:
                if live is None or identity in live:
                    return
            await asyncio.sleep(_POLL_INTERVAL)
        log.warning(
            "Temporal has no heartbeat of this supervisor (%s) after %.0f s: /crash-worker may "
            "not find it",
            identity, self.ready_timeout,
        )  # fmt: skip

    async def _ready_later(self, proc: asyncio.subprocess.Process) -> None:
        try:
            await self._wait_ready(proc)
        except WorkerStartError as err:  # its watcher replaces it
            log.warning("%s", err)
        else:
            log.info("Worker pid %s is polling %r too", proc.pid, self.settings.task_queue)

    async def _report_other_workers(self) -> None:
        """Say so when this supervisor's Worker is about to join Workers of other processes."""
        for attempt in range(_REPORT_ATTEMPTS):
            try:
                # A warning: a Worker Temporal has no heartbeat of, but that polls, counts too.
                others = await other_workers(
                    self.client, self.settings.namespace, self.settings.task_queue,
                    this_host=self.host, unheard_polls=True,
                )  # fmt: skip
                break
            except RPCError as err:  # a busy server sheds load: ask again, briefly
                if err.status not in _BUSY or attempt == _REPORT_ATTEMPTS - 1:
                    log.debug("Could not list the Workers of %r: %s", self.settings.task_queue, err)
                    return
                await asyncio.sleep(0.5 * (attempt + 1))
            except Exception as err:  # a report, not a precondition
                log.debug("Could not list the Workers of %r: %s", self.settings.task_queue, err)
                return
        if others:
            log.warning(
                "Task queue %r already has %d Worker(s) of another process polling: %s. This "
                "run's Worker joins them; stop them if they are left over (README: More Workers)",
                self.settings.task_queue, len(others), "; ".join(map(str, others)),
            )  # fmt: skip

    def _release_soon(self, dead: set[str]) -> None:
        """Reset, in the background beside the restart, the sticky queues of the conversations
        the `dead` Workers held (ResetStickyTaskQueue): their next tasks go to the normal queue."""
        task = asyncio.create_task(self._reset_sticky(left_by=dead))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _release_gone(self) -> None:
        """At start: reset the conversations held by Workers on the task queue that Temporal's
        heartbeats show gone (a previous run's, SIGKILLed with its supervisor). Where Temporal
        keeps no heartbeats, every conversation is reset."""
        if not self.reset_sticky:
            return
        try:
            gone = await gone_workers(
                self.client, self.settings.namespace, self.settings.task_queue
            )
        except Exception as err:  # worst case a conversation waits out the sticky timeout
            log.warning("Could not list the Workers of %r: %s", self.settings.task_queue, err)
            return
        if gone is None:
            await self._reset_sticky()
        elif gone:
            await self._reset_sticky(left_by=set(gone))

    async def _reset_sticky(self, left_by: set[str] | None = None) -> None:
        """Reset the sticky queues of the running conversations (`left_by`: only those whose last
        workflow task one of these dead Workers completed)."""
        if not self.reset_sticky:
            return
        try:
            count = await reset_sticky_queues(
                self.client, self.settings.namespace, self.settings.task_queue, left_by=left_by
            )
        except Exception as err:  # worst case a conversation waits out the sticky timeout
            log.warning("Could not reset sticky queues: %s", err)
            return
        if count:
            log.info("Reset the sticky queue of %d running conversation(s)", count)

    def _control_done(self, task: asyncio.Task[None]) -> None:
        # Without the control Worker, /crash-worker requests would wait unanswered: say so.
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "A control Worker of %r failed",
                self.settings.control_task_queue,
                exc_info=task.exception(),
            )

    def _backoff(self) -> float:
        now = time.monotonic()
        self._deaths.append(now)
        while self._deaths and now - self._deaths[0] > _DEATH_WINDOW:
            self._deaths.popleft()
        return min(_BACKOFF_MAX, _BACKOFF_BASE * 2 ** (len(self._deaths) - 1))

    async def _watch(self, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        self._slots.pop(proc.pid, None)  # its port is free for the next child
        if self._stopping:
            return
        if proc in self._procs:
            # First of all: a reply that reaches Temporal before the reset waits out the sticky
            # timeout on the dead queue; one after it goes to the normal queue.
            self._release_soon({worker_identity(proc.pid, self.host)})
        if self._standby.holds(proc):
            await self._standby_died(proc, code)
            return
        if proc not in self._procs:
            return  # a deliberate stop or restart; whoever did it starts the next child
        # A warm standby takes over at once; a crash loop still slows down, since each promotion
        # is followed by a new standby's start-up, and a standby dying early backs off.
        delay = 0.0 if self.standby_pid is not None else self._backoff()
        log.warning(
            "Worker pid %s exited on its own (code %s); restarting in %.1f s", proc.pid, code, delay
        )
        await asyncio.sleep(delay)
        async with self._lock:
            if self._stopping or proc not in self._procs:
                return  # someone restarted it meanwhile
            try:
                await self._replace_locked(kill=True, dead=proc)
            except Exception:
                # A child that died before polling has its own watcher, which retries.
                log.exception("Restarting the Worker failed")

    async def _standby_died(self, proc: asyncio.subprocess.Process, code: int) -> None:
        """A standby exited before it was needed: prepare another, with the crash backoff."""
        delay = self._backoff()
        log.warning(
            "Standby Worker pid %s exited (code %s); preparing another in %.1f s",
            proc.pid,
            code,
            delay,
        )
        await asyncio.sleep(delay)
        async with self._lock:
            self._standby.forget(proc)
            if self.running:  # otherwise the next restart prepares one
                await self._prepare_standby()

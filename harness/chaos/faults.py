"""The faults: what each one does to the deployment, and the seeded schedule they follow.

    schedule(kinds, seconds, rng) -> [Fault(at, kind, seconds)], every kind at least once, printed
    Faults.apply(fault) -> one component taken (a lock each: no two faults on one at once)
        -> SIGKILL | SIGSTOP ... SIGCONT | stopped ... started on the same data | an outage
        -> a FaultRecord: when, on what (pid), how long, or why it was skipped

    SIGKILL    worker (the active Worker), standby (the warm standby), bot (`refund-bot run` on
               SQLite, one of the two `refund-bot bot` on PostgreSQL: a service manager starts
               it again), temporal (the dev server, started again on its database file)
    restart    postgres (stopped and started again on its data)
    SIGSTOP    each of those, for a few seconds, then SIGCONT
    outage     slack_error (the Slack fake answers 500), slack_silent (it does not answer),
               database (PostgreSQL stopped; on SQLite, every store file write-locked), each for
               --outage-seconds

Faults overlap (each has its own task); a component's faults take turns. Whatever a fault paused
or took out is given back when the drill ends, even cut short.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from harness.chaos.deployment import Backend, Deployment
from harness.chaos.processes import pause, resume

KILLS = ("worker_kill", "standby_kill", "bot_kill", "temporal_kill")
PAUSES = ("worker_pause", "standby_pause", "bot_pause", "temporal_pause")
OUTAGES = ("slack_error", "slack_silent", "database_outage")
# Faults that take the stores' database away, and those that take Slack away.
DATABASE_FAULTS = ("postgres_restart", "postgres_pause", "database_outage")
SLACK_FAULTS = ("slack_error", "slack_silent")


def fault_kinds(backend: Backend) -> tuple[str, ...]:
    """The random faults a backend's deployment has components for (outages apart)."""
    if backend == "postgresql":
        return (*KILLS, "postgres_restart", *PAUSES, "postgres_pause")
    return (*KILLS, *PAUSES)


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the fault phase begins
    kind: str
    seconds: float  # how long the component stays down, paused or out

    def __str__(self) -> str:
        return f"+{self.at:6.1f}s {self.kind} for {self.seconds:.1f}s"


@dataclass(frozen=True)
class Timings:
    gap: tuple[float, float]  # between two random faults
    pause: tuple[float, float]  # a SIGSTOP's length
    down: tuple[float, float]  # Temporal killed, or PostgreSQL restarted: until it starts again
    outage: float  # each dependency outage


def schedule(backend: Backend, seconds: float, timings: Timings, rng: random.Random) -> list[Fault]:
    """Random faults over `seconds`: each kind at least once (in a shuffled order), then kinds at
    random; gaps drawn from timings.gap. The three outages at a quarter, a half and three
    quarters of the phase (so never two at once), each timings.outage long."""
    kinds = list(fault_kinds(backend))
    rng.shuffle(kinds)
    faults: list[Fault] = []
    at = rng.uniform(*timings.gap) / 2
    while at < seconds or kinds:
        kind = kinds.pop() if kinds else rng.choice(fault_kinds(backend))
        length = rng.uniform(*(timings.down if kind in ("temporal_kill", "postgres_restart")
                               else timings.pause))  # fmt: skip
        faults.append(Fault(round(at, 1), kind, round(length, 1)))
        at += rng.uniform(*timings.gap)
    for i, kind in enumerate(OUTAGES):
        start = seconds * (i + 1) / 4 - timings.outage / 2
        faults.append(Fault(round(max(0.0, start), 1), kind, timings.outage))
    return sorted(faults, key=lambda f: f.at)


def phase_seconds(seconds: float, outage: float) -> float:
    """The fault phase: at least long enough for three outages a quarter apart."""
    return max(seconds, 4 * outage + 4)


@dataclass
class FaultRecord:
    fault: Fault
    started: float | None = None  # seconds since the phase began
    ended: float | None = None
    target: str = ""
    seconds: float = 0.0  # how long it lasted
    skipped: str | None = None
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.started is not None and self.skipped is None and self.error is None

    def line(self) -> str:
        what = f"{self.fault.kind} {self.target}".strip()
        if self.skipped:
            return f"+{self.fault.at:6.1f}s {what}: skipped ({self.skipped})"
        if self.error:
            return f"+{self.started or 0:6.1f}s {what}: FAILED ({self.error})"
        return f"+{self.started:6.1f}s {what}, {self.ended - self.started:.1f}s"  # type: ignore[operator]


@dataclass
class Faults:
    """Every fault at its time, whatever else is down: a bot may be killed holding acknowledged
    events not yet delivered, Slack and the database may fail together, a Slack that does not
    answer or a paused Worker may outlast a post's local try."""

    deployment: Deployment
    rng: random.Random
    say: Callable[[str], None]
    started_at: float = 0.0
    records: list[FaultRecord] = field(default_factory=list)
    temporal_down: asyncio.Event = field(default_factory=asyncio.Event)
    # Set while the scheduled database outage holds (not a restart or a pause), until the
    # time.monotonic() in database_back_at.
    database_out: asyncio.Event = field(default_factory=asyncio.Event)
    database_back_at: float = 0.0
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _paused: dict[int, str] = field(default_factory=dict)

    def now(self) -> float:
        return time.monotonic() - self.started_at

    async def run(self, faults: list[Fault]) -> None:
        """Apply every fault at its time (each in a task of its own: faults overlap)."""
        self.started_at = time.monotonic()
        tasks = []
        for fault in faults:
            await asyncio.sleep(max(0.0, fault.at - self.now()))
            record = FaultRecord(fault)
            self.records.append(record)
            tasks.append(asyncio.create_task(self._apply(record)))
        try:
            await asyncio.gather(*tasks)
            await self._make_up()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.restore()

    async def _make_up(self) -> None:
        """A kind whose every fault found nothing to take (a standby not started again yet after
        a run of Worker kills, a bot still restarting) is applied once more now, once: each kind
        is meant to hit the deployment at least once."""
        missed = {}
        for record in self.records:
            if record.skipped and record.fault.kind not in missed:
                missed[record.fault.kind] = record.fault.seconds
        for record in self.records:
            if record.done:
                missed.pop(record.fault.kind, None)
        for kind, seconds in missed.items():
            again = FaultRecord(Fault(round(self.now(), 1), kind, seconds))
            self.records.append(again)
            await self._apply(again)

    def restore(self) -> None:
        """Whatever is still paused or out is given back (after a failure or a cancellation)."""
        resume(list(self._paused))
        self._paused.clear()
        self.deployment.slack.outage(None)

    def _components(self, kind: str) -> list[str]:
        """What a fault takes: its component, one fault at a time each (sorted: no deadlock)."""
        taken = {kind.rsplit("_", 1)[0] if kind not in OUTAGES else kind}
        if kind in SLACK_FAULTS:
            taken = {"slack"}
        if kind in DATABASE_FAULTS:
            taken = {"database"}
        return sorted(taken)

    async def _apply(self, record: FaultRecord) -> None:
        kind = record.fault.kind
        record.seconds = record.fault.seconds
        try:
            async with contextlib.AsyncExitStack() as taken:
                for component in self._components(kind):
                    await taken.enter_async_context(
                        self._locks.setdefault(component, asyncio.Lock())
                    )
                record.started = self.now()
                await getattr(self, f"_{kind}")(record)
                record.ended = self.now()
        except asyncio.CancelledError:
            record.error = record.error or "cancelled: the drill ended first"
            raise
        except Exception as err:
            record.error = f"{type(err).__name__}: {err}"
        self.say(f"  fault {record.line()}")

    # -- the Worker, its standby ---------------------------------------------------------------

    async def _target(self, find: Callable[[], list[int]], what: str) -> int | None:
        """A pid `find` names, waiting up to 30 s for one (a Worker may be starting up)."""
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            pids = [p for p in find() if p not in self._paused]
            if pids:
                return self.rng.choice(pids)
            await asyncio.sleep(0.2)
        return None

    async def _kill(self, record: FaultRecord, find: Callable[[], list[int]], what: str) -> None:
        pid = await self._target(find, what)
        if pid is None:
            record.skipped = f"no {what} within 30 s"
            return
        record.target = f"{what} pid {pid}"
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    async def _pause(self, record: FaultRecord, pids: list[int], what: str) -> None:
        if not pids:
            record.skipped = f"no {what} running"
            return
        record.target = f"{what} pid {', '.join(map(str, pids))}"
        stopped = pause(pids)
        for pid in stopped:
            self._paused[pid] = what
        try:
            await asyncio.sleep(record.seconds)
        finally:
            resume(stopped)
            for pid in stopped:
                self._paused.pop(pid, None)

    async def _worker_kill(self, record: FaultRecord) -> None:
        await self._kill(record, self.deployment.active_workers, "Worker")

    async def _standby_kill(self, record: FaultRecord) -> None:
        await self._kill(record, self.deployment.standbys, "standby")

    async def _worker_pause(self, record: FaultRecord) -> None:
        pid = await self._target(self.deployment.active_workers, "Worker")
        await self._pause(record, [pid] if pid else [], "Worker")

    async def _standby_pause(self, record: FaultRecord) -> None:
        pid = await self._target(self.deployment.standbys, "standby")
        await self._pause(record, [pid] if pid else [], "standby")

    # -- the bots --------------------------------------------------------------------------------

    async def _bot_kill(self, record: FaultRecord) -> None:
        bot = self.rng.choice(self.deployment.bots)
        if bot.service.pid is None:
            record.skipped = f"{bot.name} not running"
            return
        pid = bot.service.kill()
        record.target = f"{bot.name} pid {pid}"

    async def _bot_pause(self, record: FaultRecord) -> None:
        bot = self.rng.choice(self.deployment.bots)
        pid = bot.service.pid
        await self._pause(record, [pid] if pid else [], bot.name)

    # -- Temporal --------------------------------------------------------------------------------

    async def _temporal_kill(self, record: FaultRecord) -> None:
        temporal = self.deployment.temporal
        record.target = f"Temporal pid {temporal.pid}"
        self.temporal_down.set()
        try:
            await temporal.kill()
            await asyncio.sleep(record.seconds)
        finally:
            self.temporal_down.clear()
            await temporal.start()  # on the same database file

    async def _temporal_pause(self, record: FaultRecord) -> None:
        pid = self.deployment.temporal.pid
        self.temporal_down.set()
        try:
            await self._pause(record, [pid] if pid else [], "Temporal")
        finally:
            self.temporal_down.clear()

    # -- PostgreSQL ------------------------------------------------------------------------------

    async def _postgres_restart(self, record: FaultRecord) -> None:
        postgres = self.deployment.postgres
        assert postgres is not None
        record.target = "PostgreSQL"
        try:
            await postgres.take_down()
            await asyncio.sleep(record.seconds)
        finally:
            await postgres.bring_up()

    async def _postgres_pause(self, record: FaultRecord) -> None:
        postgres = self.deployment.postgres
        assert postgres is not None
        await self._pause(record, sorted(postgres.server_pids), "PostgreSQL")

    # -- dependency outages ----------------------------------------------------------------------

    async def _slack_error(self, record: FaultRecord) -> None:
        await self._slack_outage(record, "error")

    async def _slack_silent(self, record: FaultRecord) -> None:
        await self._slack_outage(record, "silent")

    async def _slack_outage(self, record: FaultRecord, kind: Literal["error", "silent"]) -> None:
        record.target = f"Slack API ({'HTTP 500' if kind == 'error' else 'no answer'})"
        self.deployment.slack.outage(kind)
        try:
            await asyncio.sleep(record.seconds)
        finally:
            self.deployment.slack.outage(None)

    async def _database_outage(self, record: FaultRecord) -> None:
        postgres = self.deployment.postgres
        if postgres is not None:
            record.target = "PostgreSQL stopped"
            await postgres.take_down()
        else:
            record.target = "SQLite stores write-locked"
            held = await asyncio.to_thread(self._lock_sqlite)
        self.database_back_at = time.monotonic() + record.seconds
        self.database_out.set()
        try:
            await asyncio.sleep(record.seconds)
        finally:
            self.database_out.clear()
            if postgres is not None:
                await postgres.bring_up()
            else:
                await asyncio.to_thread(_unlock, held)

    def _lock_sqlite(self) -> list[sqlite3.Connection]:
        """The write lock of every store file, held (what a backup or a stuck writer does):
        writers wait their busy timeout, then fail; readers go on (WAL)."""
        held: list[sqlite3.Connection] = []
        try:
            for path in sorted(self.deployment.settings.data_dir.glob("*.sqlite")):
                db = sqlite3.connect(
                    path, timeout=30.0, isolation_level=None, check_same_thread=False
                )
                held.append(db)
                db.execute("BEGIN IMMEDIATE")
        except BaseException:
            _unlock(held)
            raise
        return held


def _unlock(held: list[sqlite3.Connection]) -> None:
    for db in held:
        with contextlib.suppress(sqlite3.Error):
            db.rollback()
        db.close()

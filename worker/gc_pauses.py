"""How long Python's full garbage collections stop this Worker: made shorter, measured, exported
and said.

    Worker built -> freeze_startup_heap: what the start made, left out of every later collection
    full collection (generation 2) -> gc.callbacks: its start and its stop -> the pause, queued
      -> each second: refund_bot_worker_gc_pause_seconds; a log line for a long one

A full collection holds the interpreter while it walks every object Python tracks: what the
Worker's start made (modules, the SDK, pydantic's schemas: about 86,000 objects, there for the
life of the process) unless frozen, and about 400 for each conversation in its cache (the
conversation's sandboxed module and its state), so the pause grows with
WORKER_CACHED_CONVERSATIONS (docs/benchmarks.md, "Garbage collection pauses"). Every workflow task
in flight waits it out, and the SDK fails one whose activation has not finished within 2 s as
deadlocked ("[TMPRL1101] Potential deadlock detected"; the task runs again, on a replay). A
warning says so from half of that, with what to change.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator
from datetime import timedelta

from temporalio.common import MetricMeter

log = logging.getLogger(__name__)

PAUSE_METRIC = "refund_bot_worker_gc_pause_seconds"
PAUSE_DESCRIPTION = (
    "How long each of the Worker's full (generation 2) garbage collections held its interpreter"
)
# From a small heap's few milliseconds to past the SDK's deadlock timeout (worker/telemetry.py).
PAUSE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
# The SDK's deadlock detector (temporalio 1.35, not configurable): an activation that has not
# finished after this many seconds of wall time fails the workflow task.
DEADLOCK_TIMEOUT = 2.0
NOTED = 0.1  # a pause from here is logged (INFO)
WARNED = DEADLOCK_TIMEOUT / 2  # and from here is a warning
REPORT_EVERY = 1.0


class _FullCollections:
    """gc.callbacks' member: the length of each full collection. The collector calls it in
    whichever thread allocated (a workflow task's, too), holding the interpreter, so it only
    reads a clock and appends (a deque's append is atomic); the reports are made on the loop."""

    def __init__(self) -> None:
        self.started = 0.0
        self.pauses: collections.deque[float] = collections.deque(maxlen=10_000)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:  # the young generations' collections are short and frequent
            return
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self.started)


def freeze_startup_heap() -> int:
    """Collect once, then move every object tracked now out of all later collections (gc.freeze);
    returns how many. Called by the Worker's own process as its start ends, before a standby waits
    to be promoted: what the start made lives as long as the process, and a full collection that
    walks only what came after is about half as long at the default cache. Not for a process that
    will drop what it holds now: a frozen object is still freed when nothing refers to it, but a
    cycle of frozen objects never is."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def said(pause: float, cached_conversations: int) -> tuple[int, str] | None:
    """The log line for a pause of `pause` seconds (level, message), or None below NOTED."""
    if pause < NOTED:
        return None
    line = f"a full garbage collection held this Worker {pause:.2f} s"
    if pause < WARNED:
        return logging.INFO, f"{line} (its cache holds up to {cached_conversations} conversations)"
    past = "past" if pause >= DEADLOCK_TIMEOUT else "more than half of"
    return logging.WARNING, (
        f"{line}, {past} the SDK's {DEADLOCK_TIMEOUT:.0f} s deadlock timeout (a workflow task "
        "in flight that long fails and runs again). The pause grows with the conversations "
        f"cached (WORKER_CACHED_CONVERSATIONS={cached_conversations}): cache fewer in each "
        "Worker, or run more Workers (REFUND_BOT_WORKERS)"
    )


@contextlib.asynccontextmanager
async def watching_gc_pauses(
    meter: MetricMeter, cached_conversations: int, every: float = REPORT_EVERY
) -> AsyncIterator[None]:
    """While inside: every full collection of this process recorded in `meter`'s histogram, and
    the long ones logged (see `said`), `every` seconds and once more on the way out."""
    histogram = meter.create_histogram_timedelta(PAUSE_METRIC, PAUSE_DESCRIPTION)
    watched = _FullCollections()

    def report() -> None:
        while watched.pauses:
            pause = watched.pauses.popleft()
            histogram.record(timedelta(seconds=pause))
            if (line := said(pause, cached_conversations)) is not None:
                log.log(*line)

    async def reporting() -> None:
        while True:
            await asyncio.sleep(every)
            report()

    gc.callbacks.append(watched)
    task = asyncio.create_task(reporting())
    try:
        yield
    finally:
        gc.callbacks.remove(watched)
        task.cancel()
        report()

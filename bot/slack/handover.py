"""Work handed over by Slack requests already answered, started once the requests stop coming.

    handler: arrived() -> checks -> 200 -> hand_over(work) -> (quiet, or waited long) -> task
    arrived() -> cyclic garbage collector held -> (quiet, or held long) -> released

Started at once, bolt's work for one request (about a millisecond) would run in front of the
acks still to be sent in a burst; started after it, it costs them nothing. So handed-over work
waits until no request has arrived for QUIET seconds, never more than MAX_WAIT, and starts in
the order it was handed over. The garbage collector waits the same way (`arrived`).
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Work = Callable[[], Awaitable[None]]

# No request for this long: the burst is over.
QUIET = 0.002
# The longest handed-over work waits, and the collector is held, while requests keep arriving.
MAX_WAIT = 0.05


class Handovers:
    def __init__(self, *, quiet: float = QUIET, max_wait: float = MAX_WAIT) -> None:
        self._quiet = quiet
        self._max_wait = max_wait
        self._last_arrival = 0.0
        self._queue: collections.deque[tuple[float, Work]] = collections.deque()
        # When this instance disabled the collector (None: it holds nothing). A collector someone
        # else disabled is theirs to enable: it is left alone.
        self._holding_gc_since: float | None = None
        self._starter: asyncio.Task[None] | None = None
        # Held until done: the event loop keeps only a weak reference to a task.
        self._running: set[asyncio.Task[None]] = set()

    def arrived(self) -> None:
        """A request came in: handed-over work, and the garbage collector, wait a little longer.

        A burst's requests each leave their parsed body and bolt work queued here, so a
        young-generation collection in mid-burst walks every request in flight (1-8 ms, in front
        of every ack still to be sent; bench.slack_ack). Held until the quiet, it runs after
        the acks; reference counting frees most garbage meanwhile."""
        loop = asyncio.get_running_loop()
        self._last_arrival = loop.time()
        if self._holding_gc_since is None and gc.isenabled():
            gc.disable()
            self._holding_gc_since = self._last_arrival
            self._ensure_starter(loop)

    def hand_over(self, work: Work) -> None:
        """Start `work` once requests stop coming (or after MAX_WAIT)."""
        loop = asyncio.get_running_loop()
        self._queue.append((loop.time(), work))
        self._ensure_starter(loop)

    async def drain(self, within: float) -> None:
        """Start every queued piece now and wait up to `within` seconds for all to finish."""
        self._release_gc()
        while self._queue:
            self._start(self._queue.popleft()[1])
        if self._running:
            await asyncio.wait(set(self._running), timeout=within)

    def _ensure_starter(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._starter is None or self._starter.done():
            self._starter = loop.create_task(self._start_all(), name="slack handovers")

    async def _start_all(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue or self._holding_gc_since is not None:
                due = min(self._last_arrival + self._quiet, self._waiting_since() + self._max_wait)
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                    continue
                self._release_gc()  # first: bolt's work below allocates, and may collect
                if not self._queue:
                    continue
                self._start(self._queue.popleft()[1])
                # Three turns of the loop: the piece's first step runs, the loop reads the
                # sockets (requests that came in meanwhile), their handlers run and call
                # arrived(). Only then is the next piece considered.
                for _ in range(3):
                    await asyncio.sleep(0)
        finally:
            self._release_gc()  # cancelled (shutdown) or failed: never leave it held

    def _waiting_since(self) -> float:
        """When the oldest of the queued work and the held collector began to wait."""
        since = [self._queue[0][0]] if self._queue else []
        if self._holding_gc_since is not None:
            since.append(self._holding_gc_since)
        return min(since)

    def _release_gc(self) -> None:
        if self._holding_gc_since is not None:
            self._holding_gc_since = None
            gc.enable()

    def _start(self, work: Work) -> None:
        task = asyncio.ensure_future(work())
        self._running.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("slack: handling an acknowledged request failed", exc_info=task.exception())

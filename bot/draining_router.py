"""The router, its calls outliving the platform task that made them: a stop never cuts one short.

    adapter -> DrainingRouter.on_message / on_click -> its own task -> ConversationRouter
    stopping: platforms stop taking events -> drain() -> the Worker and Temporal stop

A platform stops by being cancelled, and a message it already acknowledged may still be on its way
to Temporal (a Slack or Discord listener task, or the terminal channel awaiting the router). Each
call runs in a task of its own, shielded from the caller's cancellation, and `drain()` waits for
the ones still running before the stack underneath stops: each finishes, or the router keeps its
message in the inbox. Nothing else changes: this is the ConversationRouter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from bot.conversations import ConversationRouter, InboundClick, InboundMessage, Routed

log = logging.getLogger(__name__)


class DrainingRouter(ConversationRouter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._calls: set[asyncio.Task[Routed]] = set()

    async def on_message(self, message: InboundMessage) -> Routed:
        return await self._own_task(super().on_message(message))

    async def on_click(self, click: InboundClick) -> Routed:
        return await self._own_task(super().on_click(click))

    async def _own_task(self, call: Coroutine[Any, Any, Routed]) -> Routed:
        task = asyncio.create_task(call)
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        try:
            # The caller may be cancelled (its platform stopping); the delivery goes on, drained.
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_log_failure)  # nobody else will see how it ended
            raise

    @property
    def in_flight(self) -> int:
        return len(self._calls)

    async def drain(self, seconds: float) -> int:
        """Wait up to `seconds` for the calls still running. Returns how many did not end in
        time (each is logged; it is cancelled with the process)."""
        if not self._calls:
            return 0
        log.info("Waiting for %d router call(s) in flight", len(self._calls))
        _, pending = await asyncio.wait(set(self._calls), timeout=seconds)
        for task in pending:
            log.error("A router call did not end within %.0f s of the stop: %r", seconds, task)
        return len(pending)


def _log_failure(task: asyncio.Task[Routed]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("A router call failed after its caller stopped", exc_info=task.exception())

"""One process, two Temporal Workers on the task queue: the conversations and their effects.

    RefundConversation and its local steps -> `conversations` (polls workflow tasks only)
    regular Activities (issue_refund, a post's retries, ...) -> `effects` (polls Activity tasks)

Why two: a Worker's core hands its Python side the next local activity before any regular
Activity task it holds (sdk-core `Worker::activity_poll`, a biased select). A regular task is
taken from the server first, and its attempt counts as started there: its heartbeat clock runs
while the Worker works through a steady stream of local steps. At 1,000 conversations at once,
one Worker ran an issue_refund up to 55 s after Temporal handed it over (about 100 refunds in
1,000 were then asked again after the 10 s heartbeat window); with the effects on a Worker of
their own, every attempt started within a second and none was asked twice (docs/benchmarks.md,
"Throughput against the reference demo"). Both share this process's event loop, stores and
identity.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from temporalio.worker import Worker


@dataclass
class WorkerPair:
    conversations: Worker  # no_remote_activities: workflow tasks and their local steps
    effects: Worker  # Activities only: never waits behind a local step
    _running: AsyncExitStack = field(default_factory=AsyncExitStack, repr=False)

    async def __aenter__(self) -> WorkerPair:
        # Effects first, so a conversation's first Activity finds its poller; they stop last,
        # after the conversations, so an effect in flight gets the graceful shutdown's time.
        try:
            await self._running.enter_async_context(self.effects)
            await self._running.enter_async_context(self.conversations)
        except BaseException:
            await self._running.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._running.aclose()

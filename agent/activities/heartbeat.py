"""Heartbeating while an Activity waits on something slow (a model, a chat platform, Stripe).

A Worker that dies mid-call stops heartbeating, and Temporal retries the Activity on another Worker
after the heartbeat timeout (seconds) instead of the start-to-close timeout (minutes). A slow but
live call keeps heartbeating and is not mistaken for a dead one.

Only a regular Activity heartbeats. The same code also runs as a local activity (a post's first
try, the decide step's): Temporal knows nothing of a local activity, its workflow task is what the
Worker keeps alive meanwhile, and the SDK has no heartbeat to send for it: the Worker's core finds
no such Activity and warns "Activity heartbeat failed ... UnknownActivity" for each beat (sdk-core
`record_activity_heartbeat`). Those warnings came from local posts slower than a second.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity

HEARTBEAT_EVERY_SECONDS = 1.0


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    async def beat() -> None:
        # The first beat after a second, not at once: most calls end sooner, and a beat is a
        # request to the server (about 3 ms of every post's round trip here). The heartbeat
        # timeout counts from the Activity's start, so a Worker dying in that second is still
        # noticed on time.
        while True:
            await asyncio.sleep(HEARTBEAT_EVERY_SECONDS)
            activity.heartbeat()

    if activity.info().is_local:
        yield  # its workflow task is heartbeated by the SDK: nothing to beat, nothing to warn
        return
    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()

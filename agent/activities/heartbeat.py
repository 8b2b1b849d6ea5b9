"""Heartbeating while an Activity waits on something slow (a model, a chat platform, Stripe).

A Worker that dies mid-call stops heartbeating, and Temporal retries the Activity on another Worker
after the heartbeat timeout (seconds) instead of the start-to-close timeout (minutes). A slow but
live call keeps heartbeating and is not mistaken for a dead one.
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

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()

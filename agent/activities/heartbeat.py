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
        while True:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY_SECONDS)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()

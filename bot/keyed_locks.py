"""KeyedLocks: one asyncio.Lock per key (a chat thread), kept only while in use.

Bolt and discord.py run each event's handler as its own task, so without a lock two messages of
one thread could reach the router out of order. A lock per thread keeps each thread in arrival
order and lets different threads proceed side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Hashable


class KeyedLocks:
    """One asyncio.Lock per key while anyone holds or waits for it; forgotten when free."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)

"""Opening the SQLite stores: one file per owner of facts, each through aiosqlite."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiosqlite

# (file, schema) pairs this process has already created: the schema runs once per file, not on
# every Activity call. Another process creating the same tables is harmless (IF NOT EXISTS).
_ready: set[tuple[str, str]] = set()
# One creation at a time per file in this process: concurrent first opens would both switch the
# journal mode, and the loser gets "database is locked" at once (the busy timeout does not apply).
_creating: dict[tuple[str, str], asyncio.Lock] = {}


@asynccontextmanager
async def open_db(path: Path, schema: str) -> AsyncIterator[aiosqlite.Connection]:
    """Open (creating if needed) a store, with the settings every store wants.

    WAL lets the bot, the terminal and the Worker read while another process writes; the busy
    timeout makes a writer wait for a lock instead of failing at once.
    """
    key = (str(path), schema)
    if key not in _ready:
        async with _creating.setdefault(key, asyncio.Lock()):
            if key not in _ready:
                path.parent.mkdir(parents=True, exist_ok=True)
                async with aiosqlite.connect(path, timeout=10) as db:
                    await db.execute("PRAGMA busy_timeout=10000")
                    await db.execute("PRAGMA journal_mode=WAL")  # persistent: once per file
                    await db.executescript(schema)
                    await db.commit()
                _ready.add(key)
    async with aiosqlite.connect(path, timeout=10) as db:
        db.row_factory = aiosqlite.Row
        await db.execute("PRAGMA busy_timeout=10000")
        yield db

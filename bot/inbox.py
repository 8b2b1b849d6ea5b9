"""The local inbox: messages the platforms have acknowledged, kept until the agent has them.

    router cannot deliver now -> put -> pending ... delivered -> removed
                                               ... failed    -> retried later (attempts, error)
                                               ... never     -> dead letter (kept, with its error)

An entry is kept in SQLite (so it survives a bot restart) and delivered in arrival order within
its conversation (`workflow_id`). Nothing is dropped: an entry the agent can never take (one that
no longer parses, or that failed every attempt) moves to the dead letters with its last error,
where it holds nothing back and stays for an operator to see (`depth()`, the log).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiosqlite
from pydantic import BaseModel

from agent.stores.db import open_db

SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    queued_at TEXT NOT NULL,
    workflow_id TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    retry_at REAL
);
CREATE TABLE IF NOT EXISTS dead_letters (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    queued_at TEXT NOT NULL,
    workflow_id TEXT,
    attempts INTEGER NOT NULL,
    error TEXT NOT NULL,
    buried_at TEXT NOT NULL
);
"""
# Columns the inbox table gained after its first release: an older file gets them in place. An
# old entry has no workflow_id, so it holds back every conversation until delivered, as all did.
_ADDED_COLUMNS = (
    ("workflow_id", "TEXT"),
    ("attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("last_error", "TEXT"),
    ("retry_at", "REAL"),  # wall clock, time.time(); NULL: at the next delivery round
)
_migrated: set[str] = set()


class Pending(BaseModel):
    seq: int
    kind: str
    payload: str
    queued_at: str
    workflow_id: str | None = None
    attempts: int = 0
    last_error: str | None = None
    retry_at: float | None = None


class DeadLetter(BaseModel):
    seq: int
    kind: str
    payload: str
    queued_at: str
    workflow_id: str | None
    attempts: int
    error: str
    buried_at: str


@dataclass(frozen=True)
class InboxDepth:
    waiting: int  # to be delivered
    dead: int  # kept, never to be delivered by themselves

    def __str__(self) -> str:
        dead = f", {self.dead} dead letter{'s' if self.dead != 1 else ''}" if self.dead else ""
        return f"{self.waiting} waiting{dead}"


def _now() -> str:
    return datetime.now(UTC).isoformat()


class Inbox:
    def __init__(self, path: Path) -> None:
        self._path = path

    async def put(
        self,
        kind: str,
        payload: BaseModel,
        workflow_id: str,
        *,
        failure: str | None = None,
        retry_at: float | None = None,
    ) -> int:
        """Keep an entry. `failure`: the error of the attempt already made (counted as attempt
        1), to be tried again at `retry_at`."""
        async with self._db() as db:
            cursor = await db.execute(
                "INSERT INTO inbox (kind, payload, queued_at, workflow_id, attempts, last_error, "
                "retry_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    kind,
                    payload.model_dump_json(),
                    _now(),
                    workflow_id,
                    int(failure is not None),
                    failure,
                    retry_at,
                ),
            )
            await db.commit()
            return int(cursor.lastrowid or 0)

    async def pending(self) -> list[Pending]:
        async with self._db() as db:
            cursor = await db.execute("SELECT * FROM inbox ORDER BY seq")
            return [Pending(**dict(r)) for r in await cursor.fetchall()]

    async def holds(self, workflow_id: str) -> bool:
        """Whether an entry waits that a new one for `workflow_id` must queue behind."""
        async with self._db() as db:
            cursor = await db.execute(
                "SELECT 1 FROM inbox WHERE workflow_id = ? OR workflow_id IS NULL LIMIT 1",
                (workflow_id,),
            )
            return await cursor.fetchone() is not None

    async def remove(self, seq: int) -> None:
        async with self._db() as db:
            await db.execute("DELETE FROM inbox WHERE seq = ?", (seq,))
            await db.commit()

    async def failed(self, seq: int, error: str, retry_at: float) -> None:
        """Record a failed attempt; the entry waits until `retry_at` (time.time())."""
        async with self._db() as db:
            await db.execute(
                "UPDATE inbox SET attempts = attempts + 1, last_error = ?, retry_at = ? "
                "WHERE seq = ?",
                (error, retry_at, seq),
            )
            await db.commit()

    async def bury(self, seq: int, error: str, *, attempted: bool = True) -> None:
        """Move an entry to the dead letters with `error` (counting this attempt if `attempted`)."""
        async with self._db() as db:
            await db.execute(
                "INSERT INTO dead_letters (seq, kind, payload, queued_at, workflow_id, attempts, "
                "error, buried_at) SELECT seq, kind, payload, queued_at, workflow_id, "
                "attempts + ?, ?, ? FROM inbox WHERE seq = ?",
                (int(attempted), error, _now(), seq),
            )
            await db.execute("DELETE FROM inbox WHERE seq = ?", (seq,))
            await db.commit()

    async def dead_letters(self) -> list[DeadLetter]:
        async with self._db() as db:
            cursor = await db.execute("SELECT * FROM dead_letters ORDER BY seq")
            return [DeadLetter(**dict(r)) for r in await cursor.fetchall()]

    async def size(self) -> int:
        """Entries waiting to be delivered (dead letters not counted)."""
        return (await self.depth()).waiting

    async def depth(self) -> InboxDepth:
        async with self._db() as db:
            cursor = await db.execute(
                "SELECT (SELECT COUNT(*) FROM inbox), (SELECT COUNT(*) FROM dead_letters)"
            )
            waiting, dead = await cursor.fetchone()  # type: ignore[misc]
            return InboxDepth(int(waiting), int(dead))

    def _db(self) -> AbstractAsyncContextManager[aiosqlite.Connection]:
        return _open(self._path)


@asynccontextmanager
async def _open(path: Path) -> AsyncIterator[aiosqlite.Connection]:
    """open_db, plus the columns an inbox file from before them lacks (checked once per file)."""
    async with open_db(path, SCHEMA) as db:
        if str(path) not in _migrated:
            cursor = await db.execute("PRAGMA table_info(inbox)")
            have = {row["name"] for row in await cursor.fetchall()}
            for name, declaration in _ADDED_COLUMNS:
                if name not in have:
                    await db.execute(f"ALTER TABLE inbox ADD COLUMN {name} {declaration}")
            await db.commit()
            _migrated.add(str(path))
        yield db

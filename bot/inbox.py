"""The local inbox: customers' messages kept while Temporal cannot be reached.

A message that cannot be delivered now is kept (SQLite, so it survives a bot restart) and delivered
in arrival order once Temporal answers. Nothing is dropped.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from agent.stores.db import open_db

SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    queued_at TEXT NOT NULL
);
"""


class Pending(BaseModel):
    seq: int
    kind: str
    payload: str
    queued_at: str


class Inbox:
    def __init__(self, path: Path) -> None:
        self._path = path

    async def put(self, kind: str, payload: BaseModel) -> int:
        async with open_db(self._path, SCHEMA) as db:
            cursor = await db.execute(
                "INSERT INTO inbox (kind, payload, queued_at) VALUES (?, ?, ?)",
                (kind, payload.model_dump_json(), datetime.now(UTC).isoformat()),
            )
            await db.commit()
            return int(cursor.lastrowid or 0)

    async def pending(self) -> list[Pending]:
        async with open_db(self._path, SCHEMA) as db:
            cursor = await db.execute("SELECT * FROM inbox ORDER BY seq")
            return [Pending(**dict(r)) for r in await cursor.fetchall()]

    async def remove(self, seq: int) -> None:
        async with open_db(self._path, SCHEMA) as db:
            await db.execute("DELETE FROM inbox WHERE seq = ?", (seq,))
            await db.commit()

    async def size(self) -> int:
        async with open_db(self._path, SCHEMA) as db:
            cursor = await db.execute("SELECT COUNT(*) FROM inbox")
            (n,) = await cursor.fetchone()  # type: ignore[misc]
            return int(n)

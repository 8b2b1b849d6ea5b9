"""The demo hold switch: whether new conversations wait for /refund-release before the refund.

A setting (REFUND_HOLD_BEFORE_REFUND) gives its default; the /refund-hold command changes it, and
the change is kept in SQLite so it survives a bot restart and is shared by every bot process on
this data directory. A conversation takes the value once, when it starts.
"""

from __future__ import annotations

from pathlib import Path

from agent.stores.db import open_db

SCHEMA = "CREATE TABLE IF NOT EXISTS switches (name TEXT PRIMARY KEY, enabled INTEGER NOT NULL);"


class HoldSwitch:
    def __init__(self, path: Path, default: bool) -> None:
        self._path = path
        self._default = default

    async def enabled(self) -> bool:
        async with open_db(self._path, SCHEMA) as db:
            cursor = await db.execute("SELECT enabled FROM switches WHERE name = 'hold'")
            row = await cursor.fetchone()
        return self._default if row is None else bool(row[0])

    async def set(self, enabled: bool) -> None:
        async with open_db(self._path, SCHEMA) as db:
            await db.execute(
                "INSERT INTO switches VALUES ('hold', ?) "
                "ON CONFLICT(name) DO UPDATE SET enabled = excluded.enabled",
                (int(enabled),),
            )
            await db.commit()

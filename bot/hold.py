"""The demo hold switch: whether new conversations wait for /refund-release before the refund.

A setting (REFUND_HOLD_BEFORE_REFUND) gives its default; the /refund-hold command changes it, and
the change is kept in the stores' database (DATABASE_URL) so it survives a bot restart and is
shared by every bot process on it. A conversation takes the value once, when it starts.
"""

from __future__ import annotations

from agent.stores.database import Database, Schema, both

SCHEMA = Schema(
    "hold",
    "bot.sqlite",
    (
        both(
            1,
            "switches",
            "CREATE TABLE IF NOT EXISTS switches (name TEXT PRIMARY KEY, enabled INTEGER NOT NULL)",
        ),
    ),
)


class HoldSwitch:
    def __init__(self, database: Database, default: bool) -> None:
        self._database = database
        self._default = default

    async def enabled(self) -> bool:
        async with self._database.connect(SCHEMA) as db:
            enabled = await db.fetchval("SELECT enabled FROM switches WHERE name = 'hold'")
        return self._default if enabled is None else bool(enabled)

    async def set(self, enabled: bool) -> None:
        async with self._database.connect(SCHEMA) as db:
            await db.execute(
                "INSERT INTO switches (name, enabled) VALUES ('hold', ?) "
                "ON CONFLICT (name) DO UPDATE SET enabled = excluded.enabled",
                int(enabled),
            )

"""A named lease in the database every bot process shares: one holder at a time, renewed by it,
taken over by another process once it expires.

    try_acquire -> None: this process holds it (taken, or renewed) | the Holder that does
    release -> free at once ; no renewal (the holder died) -> free once `ttl` has passed
    holder_now -> who holds it, read without taking it

Its clock is the database's rows, written with each process's wall clock: hosts that share it keep
their clocks in sync (NTP), as they must for Temporal's timers too. Held by: the Discord gateway of
a token (bot/discord/gateway_lease.py), the running /refund-demo story (demo/pace.py).
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

from agent.stores.database import Database, Schema, both

# The lease's SQL, written once: it reads the same in SQLite and PostgreSQL (`?` placeholders;
# DOUBLE PRECISION, since a REAL of PostgreSQL would round epoch seconds to minutes).
SCHEMA = Schema(
    "leases",
    "bot.sqlite",
    (
        both(
            1,
            "leases",
            """
            CREATE TABLE IF NOT EXISTS leases (
                name TEXT PRIMARY KEY,
                holder_id TEXT NOT NULL,
                holder TEXT NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                renewed_at DOUBLE PRECISION NOT NULL
            )
            """,
        ),
    ),
)
# One statement: taking over happens only when the row is ours or expired, so two processes racing
# for an expired lease cannot both win. Arguments: name, holder_id, holder, expires_at,
# renewed_at, now.
ACQUIRE = (
    "INSERT INTO leases (name, holder_id, holder, expires_at, renewed_at) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
    "holder_id = excluded.holder_id, holder = excluded.holder, "
    "expires_at = excluded.expires_at, renewed_at = excluded.renewed_at "
    "WHERE leases.holder_id = excluded.holder_id OR leases.expires_at < ?"
)
READ = "SELECT holder_id, holder, renewed_at, expires_at FROM leases WHERE name = ?"
# Arguments: name, holder_id.
RELEASE = "UPDATE leases SET expires_at = 0 WHERE name = ? AND holder_id = ?"


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: `holder` says it to a person (pid 4242 on host-a)."""

    holder: str
    renewed_at: float
    expires_at: float

    def __str__(self) -> str:
        ago = max(0.0, time.time() - self.renewed_at)
        return f"{self.holder} (renewed {ago:.0f} s ago)"


class Lease(Protocol):
    """A named lease in the database every bot process shares, held by at most one at a time."""

    name: str
    ttl: float  # seconds a holder's lease lasts from its last renewal
    holder: str  # this process, as a person reads it: "pid 4242 on bot-1"

    async def try_acquire(self) -> Holder | None:
        """Take the lease, or renew it if this process holds it: None. Someone else's holder
        while they hold it unexpired."""
        ...

    async def release(self) -> None:
        """Let go at once, so a process on standby need not wait for the lease to expire."""
        ...


class DatabaseLease:
    """The Lease in the stores' database: one row per lease, written by one statement each."""

    def __init__(
        self, database: Database, name: str, host: str, ttl: float, holder: str | None = None
    ) -> None:
        self._database = database
        self.name = name
        self.ttl = ttl
        self._holder_id = uuid.uuid4().hex  # this process, even if its pid is reused later
        self.holder = holder or f"pid {os.getpid()} on {host}"

    async def try_acquire(self) -> Holder | None:
        now = time.time()
        async with self._database.connect(SCHEMA) as db:
            await db.execute(
                ACQUIRE, self.name, self._holder_id, self.holder, now + self.ttl, now, now
            )
            row = await db.fetchrow(READ, self.name)
        assert row is not None  # just written, and a lease row is never deleted by another
        if row["holder_id"] == self._holder_id:
            return None
        return Holder(row["holder"], row["renewed_at"], row["expires_at"])

    async def release(self) -> None:
        async with self._database.connect(SCHEMA) as db:
            await db.execute(RELEASE, self.name, self._holder_id)

    async def holder_now(self) -> Holder | None:
        """Whoever holds the lease unexpired (this process included), without taking it."""
        async with self._database.connect(SCHEMA) as db:
            row = await db.fetchrow(READ, self.name)
        if row is None or row["expires_at"] < time.time():
            return None
        return Holder(row["holder"], row["renewed_at"], row["expires_at"])

"""One Discord gateway connection per bot token: a lease in the shared database, renewed by its
holder, taken over by another process once it expires.

    serve_holding_lease -> try_acquire ... held by another -> one line, Discord on standby
                                       ... acquired -> serve Discord, renew every ttl/3
    a stop -> release (a standby process takes over at its next check)
    SIGKILL -> nobody renews -> the lease expires after DISCORD_GATEWAY_LEASE_SECONDS -> taken over

`Lease` is what serve_holding_lease needs; `DatabaseLease` keeps it in the stores' database
(DATABASE_URL): on PostgreSQL every bot process of the deployment shares it, on the SQLite default
the bot processes of one host do (DATA_DIR/bot.sqlite).

Discord delivers each event to one gateway session of a token (without sharding), and two bot
processes logged in with the same token would each open one: both would answer every slash
command and route every message. So only the lease's holder connects. The lease names the token by
a hash of it, never the token. Its clock is the database's rows, written with each process's wall
clock: hosts that share it keep their clocks in sync (NTP), as they must for Temporal's timers too.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from agent.stores.database import Database, Schema, both
from bot.platform_health import PlatformHealth
from bot.reconnect import one_line

log = logging.getLogger(__name__)

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


def lease_name(token: str) -> str:
    """The lease of the gateway of `token`: a hash names it, so the row reveals nothing."""
    return "discord-gateway:" + hashlib.sha256(token.encode()).hexdigest()[:16]


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

    def __init__(self, database: Database, name: str, host: str, ttl: float) -> None:
        self._database = database
        self.name = name
        self.ttl = ttl
        self._holder_id = uuid.uuid4().hex  # this process, even if its pid is reused later
        self.holder = f"pid {os.getpid()} on {host}"

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


async def serve_holding_lease(
    lease: Lease,
    health: PlatformHealth,
    serve: Callable[[], Coroutine[Any, Any, None]],
    *,
    check_every: float | None = None,
) -> None:
    """Run `serve()` (the Discord client, its own retry loop) only while this process holds the
    lease; on standby meanwhile. Until cancelled; then the lease is released.

    Losing the lease while serving (this process stalled past its expiry and another took over,
    or the database could not renew it in time) stops Discord here at once: two gateways are worse
    than none for a moment. Then this process stands by again.
    """
    check_every = check_every or lease.ttl / 3
    try:
        while True:
            await _stand_by(lease, health, check_every)
            await _serve_while_held(lease, health, serve, check_every)
    finally:
        with contextlib.suppress(Exception):  # a database gone at the stop: the lease expires
            await lease.release()


async def _stand_by(lease: Lease, health: PlatformHealth, check_every: float) -> None:
    said: Holder | None = None
    while True:
        try:
            holder = await lease.try_acquire()
        except Exception as err:  # the database: say so and try again, never connect unleased
            health.retrying(f"gateway lease unreadable: {one_line(err)}")
            log.warning("discord: cannot read the gateway lease (%s); retrying", one_line(err))
            await asyncio.sleep(check_every)
            continue
        if holder is None:
            if said is not None:
                log.warning("discord: took over the gateway from %s: its lease ended", said.holder)
            return
        if said is None:
            log.warning(
                "discord: not connecting: the gateway of this DISCORD_TOKEN is held by %s; "
                "Discord allows one connection per token, so this process stands by and takes "
                "over if that one stops (docs/deploy.md)",
                holder,
            )
        said = holder
        health.standby(f"gateway held by {holder.holder}")
        await asyncio.sleep(check_every)


async def _serve_while_held(
    lease: Lease,
    health: PlatformHealth,
    serve: Callable[[], Coroutine[Any, Any, None]],
    check_every: float,
) -> None:
    serving = asyncio.create_task(serve(), name="discord")
    renewed = time.monotonic()
    try:
        while not serving.done():
            await asyncio.wait({serving}, timeout=check_every)
            if serving.done():
                break
            try:
                holder = await lease.try_acquire()
            except Exception as err:
                # Keep serving while the lease cannot have expired; stop before it can.
                if time.monotonic() - renewed < lease.ttl - check_every:
                    log.warning("discord: could not renew the gateway lease: %s", one_line(err))
                    continue
                holder = None
                why = f"could not renew the gateway lease for {lease.ttl:.0f} s"
            else:
                if holder is None:
                    renewed = time.monotonic()
                    continue
                why = f"the gateway lease was taken over by {holder.holder}"
            log.error("discord: disconnecting: %s; standing by", why)
            health.retrying(why)
            return
        serving.result()  # serve() ends only by cancellation; an error is its to report
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)

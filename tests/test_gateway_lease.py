"""One Discord gateway per token: the lease in the shared database, on SQLite and PostgreSQL.

two processes' leases -> one holds, the other is told who -> released or expired -> taken over
serve_holding_lease: only the holder serves; the other stands by, then takes over
"""

from __future__ import annotations

import asyncio

from agent.stores.database import Database
from bot.discord.gateway_lease import SCHEMA, DatabaseLease, lease_name, serve_holding_lease
from bot.platform_health import PlatformHealth
from harness.conditions import wait_for

TOKEN = "discord-bot-token-never-stored"


def lease(database: Database, host: str, ttl: float = 30.0) -> DatabaseLease:
    return DatabaseLease(database, lease_name(TOKEN), host=host, ttl=ttl)


async def test_one_holder_at_a_time_until_it_releases(database: Database) -> None:
    first, second = lease(database, "bot-1"), lease(database, "bot-2")
    assert await first.try_acquire() is None  # taken
    assert await first.try_acquire() is None  # renewed by its holder
    holder = await second.try_acquire()
    assert holder is not None and holder.holder == first.holder
    assert first.holder.endswith(" on bot-1") and str(holder).startswith(first.holder)

    await first.release()
    assert await second.try_acquire() is None
    assert (await first.try_acquire()) is not None  # now the second one's
    # The token itself is nowhere in the database; its hash names the lease.
    async with database.connect(SCHEMA) as db:
        rows = await db.fetch("SELECT * FROM leases")
    assert rows and all(TOKEN not in str(value) for row in rows for value in tuple(row))
    assert lease_name(TOKEN) != lease_name(TOKEN + "x")


async def test_a_holder_that_stops_renewing_is_taken_over_after_its_ttl(database: Database) -> None:
    crashed = lease(database, "bot-1", ttl=0.5)
    successor = lease(database, "bot-2", ttl=0.5)
    assert await crashed.try_acquire() is None
    assert await successor.try_acquire() is not None  # still held
    await wait_for(
        lambda: _acquired(successor), timeout=5, what="the successor to take the expired lease"
    )
    assert await crashed.try_acquire() is not None  # the old holder cannot come back


async def _acquired(lease: DatabaseLease) -> bool:
    return await lease.try_acquire() is None


async def test_only_the_holder_serves_and_a_standby_takes_over(database: Database) -> None:
    serving: list[str] = []

    def server(name: str):  # the platform's serve(): runs until cancelled
        async def serve() -> None:
            serving.append(name)
            try:
                await asyncio.Event().wait()
            finally:
                serving.remove(name)

        return serve

    one, two = PlatformHealth("discord"), PlatformHealth("discord")
    first = asyncio.create_task(
        serve_holding_lease(lease(database, "bot-1", 3), one, server("bot-1"))
    )
    await wait_for(lambda: serving == ["bot-1"], what="the first process to serve")
    second = asyncio.create_task(
        serve_holding_lease(lease(database, "bot-2", 3), two, server("bot-2"), check_every=0.1)
    )
    try:
        await wait_for(lambda: two.state == "standby", what="the second to stand by")
        assert two.ready and "gateway held by pid" in two.detail and "on bot-1" in two.detail
        assert serving == ["bot-1"]

        first.cancel()  # a stop: the lease is released, and the standby connects at once
        await asyncio.gather(first, return_exceptions=True)
        await wait_for(lambda: serving == ["bot-2"], timeout=5, what="the standby to take over")
    finally:
        for task in (first, second):
            task.cancel()
        await asyncio.gather(first, second, return_exceptions=True)
    assert serving == []

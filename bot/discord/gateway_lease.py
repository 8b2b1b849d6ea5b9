"""One Discord gateway connection per bot token: a lease in the shared database, renewed by its
holder, taken over by another process once it expires.

    serve_holding_lease -> try_acquire ... held by another -> one line, Discord on standby
                                       ... acquired -> serve Discord, renew every ttl/3
    a stop -> release (a standby process takes over at its next check)
    SIGKILL -> nobody renews -> the lease expires after DISCORD_GATEWAY_LEASE_SECONDS -> taken over

`Lease` (bot/lease.py) is what serve_holding_lease needs; `DatabaseLease` keeps it in the stores'
database (DATABASE_URL): on PostgreSQL every bot process of the deployment shares it, on the
SQLite default the bot processes of one host do (DATA_DIR/bot.sqlite).

Discord delivers each event to one gateway session of a token (without sharding), and two bot
processes logged in with the same token would each open one: both would answer every slash
command and route every message. So only the lease's holder connects. The lease names the token by
a hash of it, never the token.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from bot.lease import SCHEMA, DatabaseLease, Holder, Lease
from bot.platform_health import PlatformHealth
from bot.reconnect import one_line

log = logging.getLogger(__name__)

__all__ = ["SCHEMA", "DatabaseLease", "Lease", "lease_name", "serve_holding_lease"]


def lease_name(token: str) -> str:
    """The lease of the gateway of `token`: a hash names it, so the row reveals nothing."""
    return "discord-gateway:" + hashlib.sha256(token.encode()).hexdigest()[:16]


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

"""Many customers at once: each a local-channel user with one order of their own, paid offline.

    place_crowd(settings, n) -> n Shoppers (actor, order number) in the domain store + ledger
    at_most(limit, calls) -> every call's result, at most `limit` in flight (a crowd's own calls)

A refund story told hundreds of times needs hundreds of customers: the demo customer's refund
history grows with every refund (the owner keeps it), so from the second refund on the policy
would escalate instead of approve. Each shopper is a new customer with no refund behind them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TypeVar

from agent.models import Actor, Platform
from agent.settings import AgentSettings
from agent.stores import domain
from agent.stores.databases import database_for
from agent.stores.ledger import Ledger


@dataclass(frozen=True)
class Shopper:
    actor: Actor
    order_number: str
    amount_cents: int
    final_sale: bool

    @property
    def opening(self) -> str:
        return f"please refund order {self.order_number}"


async def place_crowd(
    settings: AgentSettings,
    count: int,
    *,
    prefix: str = "shopper",
    first_order: int = 500000,
    amount_cents: int = 2500,
    final_sale: bool = False,
    platform: Platform = "local",
) -> list[Shopper]:
    """`count` customers (user ids `<prefix><i>` on `platform`), each with one delivered order
    bought three days ago, paid in the offline ledger: $25 by default (the agent approves it
    alone)."""
    today = date.today()
    shoppers = [
        Shopper(
            Actor(platform=platform, user_id=f"{prefix}{i}", display_name=f"{prefix} {i}"),
            str(first_order + i),
            amount_cents,
            final_sale,
        )
        for i in range(count)
    ]
    database = database_for(settings)
    async with database.connect(domain.SCHEMA) as db, db.transaction():
        await db.executemany(
            "INSERT INTO customers VALUES (?, ?, ?)",
            [(f"cus_{s.actor.user_id}", s.actor.display_name, "2024-01-01") for s in shoppers],
        )
        await db.executemany(
            "INSERT INTO accounts VALUES (?, ?, ?)",
            [(platform, s.actor.user_id, f"cus_{s.actor.user_id}") for s in shoppers],
        )
        await db.executemany(
            "INSERT INTO orders VALUES (?, ?, 'desk fan', ?, 'usd', 'delivered', ?, ?, ?)",
            [
                (
                    s.order_number,
                    f"cus_{s.actor.user_id}",
                    s.amount_cents,
                    (today - timedelta(days=3)).isoformat(),
                    int(s.final_sale),
                    f"pi_crowd_{s.order_number}",
                )
                for s in shoppers
            ],
        )
    await Ledger(database).seed_payments(
        [(f"pi_crowd_{s.order_number}", s.amount_cents, "usd") for s in shoppers]
    )
    return shoppers


T = TypeVar("T")


async def at_most(limit: int, calls: Iterable[Callable[[], Awaitable[T]]]) -> list[T]:
    """Every call's result, in order, with at most `limit` of them in flight: a crowd's Signals,
    result waits or history reads sent all at once overrun the dev server (its cache of workflow
    state, its long polls per namespace) or the client's connection."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    return await asyncio.gather(*(one(call) for call in calls))

"""The application's domain store: customers, their platform accounts and their orders.

This is domain state: the application database owns it. Lookup Activities copy rows out of it into
the agent's working memory, and the copy never outranks the row. Which orders were refunded is not
domain state: the effect's owner (the offline ledger or Stripe) holds it (agent.effect_owner).
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta

from agent.models import Actor, OrderDetails
from agent.settings import DEMO_CUSTOMER
from agent.stores.database import Connection, Database, Migration, Row, Schema, both
from agent.stores.ledger import SeedRefund

_TABLES = (
    """CREATE TABLE IF NOT EXISTS customers (
        customer_id TEXT PRIMARY KEY,
        display_name TEXT NOT NULL,
        customer_since TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS accounts (
        platform TEXT NOT NULL,
        user_id TEXT NOT NULL,
        customer_id TEXT NOT NULL REFERENCES customers(customer_id),
        PRIMARY KEY (platform, user_id)
    )""",
    """CREATE TABLE IF NOT EXISTS orders (
        order_number TEXT PRIMARY KEY,
        customer_id TEXT NOT NULL REFERENCES customers(customer_id),
        item TEXT NOT NULL,
        amount_cents {cents} NOT NULL,
        currency TEXT NOT NULL,
        status TEXT NOT NULL,
        purchased_at TEXT NOT NULL,
        final_sale INTEGER NOT NULL DEFAULT 0,
        payment_ref TEXT NOT NULL
    )""",
)
SCHEMA = Schema(
    "domain",
    "domain.sqlite",
    (
        Migration(
            1,
            "customers, accounts and orders",
            sqlite=(
                *(table.format(cents="INTEGER") for table in _TABLES),
                # A copy of refund history an earlier version kept here; the effect's owner
                # holds it now.
                "DROP TABLE IF EXISTS past_refunds",
            ),
            postgresql=tuple(table.format(cents="BIGINT") for table in _TABLES),
        ),
        # lookup_customer_history reads a customer's orders on every conversation; without this it
        # read the whole orders table to find them (docs/benchmarks.md, "Stores").
        both(
            2,
            "orders by customer",
            "CREATE INDEX IF NOT EXISTS orders_by_customer "
            "ON orders (customer_id, purchased_at, order_number)",
        ),
    ),
)
_ORDER_COLUMNS = (
    "order_number, customer_id, item, amount_cents, currency, status, purchased_at, final_sale, "
    "payment_ref"
)
_INSERT_ORDER = (
    f"INSERT INTO orders ({_ORDER_COLUMNS}) VALUES (?, ?, ?, ?, 'usd', ?, ?, ?, ?) "
    "ON CONFLICT DO NOTHING"
)


@dataclass(frozen=True)
class SeedOrder:
    order_number: str
    customer_id: str
    item: str
    amount_cents: int
    status: str
    days_ago: int
    final_sale: bool = False
    # Seed only: the demo world refunded this order that many days ago. The refund is written to
    # the effect's owner (the offline ledger, or Stripe by stripe-setup), never to this store.
    refunded_days_ago: int | None = None

    @property
    def payment_ref(self) -> str:
        return f"pi_demo_{self.order_number}"


# The docs page's order and customer, plus one order that must escalate, one that must be denied,
# one that belongs to somebody else, and the demo customer's one earlier refund.
SEED_ORDERS = (
    SeedOrder("1234", DEMO_CUSTOMER, "plush python", 8000, "delivered", 12),
    SeedOrder("4500", DEMO_CUSTOMER, "espresso machine", 45000, "delivered", 9),
    SeedOrder("3003", DEMO_CUSTOMER, "mystery box (final sale)", 3500, "delivered", 20, True),
    SeedOrder("7777", "cus_marlow", "desk lamp", 6000, "delivered", 5),
    SeedOrder("1001", DEMO_CUSTOMER, "laptop stickers", 1800, "delivered", 480, False, 478),
)


def demo_refunds(today: date | None = None) -> list[SeedRefund]:
    """The seed orders' earlier refunds, for the effect's owner to record once."""
    today = today or date.today()
    return [
        SeedRefund(
            payment_ref=o.payment_ref,
            amount_cents=o.amount_cents,
            currency="usd",
            order_number=o.order_number,
            refunded_on=(today - timedelta(days=o.refunded_days_ago)).isoformat(),
        )
        for o in SEED_ORDERS
        if o.refunded_days_ago is not None
    ]


# Orders placed after the seed (`refund-bot demo` places one per run) are numbered from here up.
FIRST_PLACED_ORDER = 10001

# Local platform identities: the terminal support channel's demo users.
SEED_ACCOUNTS = (("local", "customer", DEMO_CUSTOMER), ("local", "marlow", "cus_marlow"))


def _order_values(order: SeedOrder, today: date, payment_ref: str) -> tuple[object, ...]:
    """An orders row (currency aside), purchased `order.days_ago` days before `today`."""
    purchased = (today - timedelta(days=order.days_ago)).isoformat()
    return (
        order.order_number,
        order.customer_id,
        order.item,
        order.amount_cents,
        order.status,
        purchased,
        int(order.final_sale),
        payment_ref,
    )


def _order(row: Row) -> OrderDetails:
    return OrderDetails(
        order_number=row["order_number"],
        item=row["item"],
        amount_cents=row["amount_cents"],
        currency=row["currency"],
        status=row["status"],
        purchased_at=row["purchased_at"],
        final_sale=bool(row["final_sale"]),
        payment_ref=row["payment_ref"],
    )


@dataclass(frozen=True)
class Account:
    """A customer as the domain store knows them, with every order on their account."""

    customer_id: str
    display_name: str
    customer_since: date
    orders: list[OrderDetails]


# Platform -> the customer an unknown user of that platform is linked to, or None (not linked).
NewUserLink = Callable[[str], str | None]


def _nobody(_platform: str) -> str | None:
    return None


class DomainStore:
    def __init__(self, database: Database, link_new_users: NewUserLink = _nobody) -> None:
        self._database = database
        # DEMO: an unknown chat user may be linked to the demo customer on first contact, so anyone
        # in a demo workspace can play the customer (AgentSettings.demo_customer_for). A real
        # deployment links accounts through its own sign-in and links nobody here.
        self._link_new_users = link_new_users

    async def seed(self, today: date | None = None) -> None:
        """Create the demo data once (idempotent, and safe from several processes at once)."""
        today = today or date.today()
        async with self._database.connect(SCHEMA) as db:
            await db.executemany(
                "INSERT INTO customers (customer_id, display_name, customer_since) "
                "VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                [
                    (DEMO_CUSTOMER, "Nyghtowl", (today - timedelta(days=824)).isoformat()),
                    ("cus_marlow", "Marlow", (today - timedelta(days=90)).isoformat()),
                ],
            )
            await db.executemany(_INSERT_ACCOUNT, SEED_ACCOUNTS)
            await db.executemany(
                _INSERT_ORDER, [_order_values(o, today, o.payment_ref) for o in SEED_ORDERS]
            )

    async def place_customer(self, like: str, account: Actor) -> str:
        """A new customer like `like` (their name and tenure, none of their orders), linked to
        `account`: `refund-bot demo` tells its story with a fresh one each run, so the demo
        customer's refund history (which grows with every refund: the owner keeps it) does not
        change the next run's story, nor the README's."""
        async with self._database.connect(SCHEMA) as db, db.transaction():
            customer_id = f"{like}_{secrets.token_hex(8)}"
            await db.execute(
                "INSERT INTO customers (customer_id, display_name, customer_since) "
                "SELECT ?, display_name, customer_since FROM customers WHERE customer_id = ?",
                customer_id,
                like,
            )
            await db.execute(
                "INSERT INTO accounts (platform, user_id, customer_id) VALUES (?, ?, ?)",
                account.platform,
                account.user_id,
                customer_id,
            )
        return customer_id

    async def place_order(self, like: SeedOrder, today: date | None = None) -> OrderDetails:
        """A new order shaped like `like` (its customer, item, amount and age) under the next free
        number, so that every `refund-bot demo` run refunds an order of its own.

        Its payment_ref (`pi_demo_<number>_<random>`) is the caller's to pay, as the seed's are:
        the ledger's seed_payments, or a test-mode PaymentIntent (agent.stripe_setup.pay_order,
        whose idempotency key it makes unique even when a new data directory reuses the number).
        """
        today = today or date.today()
        async with self._database.connect(SCHEMA) as db:
            while True:
                # Two runs at once may read one highest number: the primary key lets one of them
                # take it, and the other takes the next.
                highest = await db.fetchval(
                    "SELECT MAX(CAST(order_number AS INTEGER)) FROM orders WHERE "
                    + db.dialect.digits("order_number")
                )
                order = dataclasses.replace(
                    like, order_number=str(max(highest or 0, FIRST_PLACED_ORDER - 1) + 1)
                )
                payment_ref = f"{order.payment_ref}_{secrets.token_hex(4)}"
                if await db.execute(_INSERT_ORDER, *_order_values(order, today, payment_ref)):
                    break
            row = await db.fetchrow(
                f"SELECT {_ORDER_COLUMNS} FROM orders WHERE order_number = ?", order.order_number
            )
        assert row is not None
        return _order(row)

    async def _customer_id(self, db: Connection, actor: Actor) -> str | None:
        customer_id = await db.fetchval(
            "SELECT customer_id FROM accounts WHERE platform = ? AND user_id = ?",
            actor.platform,
            actor.user_id,
        )
        if customer_id is not None:
            return str(customer_id)
        linked = self._link_new_users(actor.platform)
        if not linked:
            return None
        await db.execute(_INSERT_ACCOUNT, actor.platform, actor.user_id, linked)
        return linked

    async def order_for(self, order_number: str, actor: Actor) -> OrderDetails | None:
        """The order, only if it is on this actor's account.

        Another customer's order returns None, exactly as an unknown one does, so the answer never
        reveals that an order number exists.
        """
        async with self._database.connect(SCHEMA) as db:
            customer_id = await self._customer_id(db, actor)
            if customer_id is None:
                return None
            row = await db.fetchrow(
                f"SELECT {_ORDER_COLUMNS} FROM orders WHERE order_number = ? AND customer_id = ?",
                order_number,
                customer_id,
            )
        return None if row is None else _order(row)

    async def account(self, actor: Actor) -> Account | None:
        """The actor's customer and their orders; None for a user linked to no customer."""
        async with self._database.connect(SCHEMA) as db:
            customer_id = await self._customer_id(db, actor)
            if customer_id is None:
                return None
            customer = await db.fetchrow(
                "SELECT display_name, customer_since FROM customers WHERE customer_id = ?",
                customer_id,
            )
            if customer is None:
                return None
            rows = await db.fetch(
                f"SELECT {_ORDER_COLUMNS} FROM orders WHERE customer_id = ? "
                "ORDER BY purchased_at, order_number",
                customer_id,
            )
        return Account(
            customer_id=customer_id,
            display_name=customer["display_name"],
            customer_since=date.fromisoformat(customer["customer_since"]),
            orders=[_order(row) for row in rows],
        )

    async def set_payment_ref(self, order_number: str, payment_ref: str) -> None:
        async with self._database.connect(SCHEMA) as db:
            await db.execute(
                "UPDATE orders SET payment_ref = ? WHERE order_number = ?",
                payment_ref,
                order_number,
            )

    async def orders_paid_offline(self) -> list[OrderDetails]:
        """Orders whose payment exists only in the offline ledger (the seed's pi_demo_…)."""
        async with self._database.connect(SCHEMA) as db:
            rows = await db.fetch(
                f"SELECT {_ORDER_COLUMNS} FROM orders WHERE payment_ref LIKE 'pi~_demo~_%' "
                "ESCAPE '~' ORDER BY order_number"
            )
        return [_order(row) for row in rows]

    async def payments(self) -> list[tuple[str, int, str]]:
        """(payment_ref, amount_cents, currency) of every order: the ledger seeds its charges."""
        async with self._database.connect(SCHEMA) as db:
            rows = await db.fetch("SELECT payment_ref, amount_cents, currency FROM orders")
        return [(r["payment_ref"], int(r["amount_cents"]), r["currency"]) for r in rows]


_INSERT_ACCOUNT = (
    "INSERT INTO accounts (platform, user_id, customer_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
)

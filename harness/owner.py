"""The demo world beyond its seed: orders placed for a test, refunds the ledger holds."""

from __future__ import annotations

from datetime import date, timedelta

from agent.models import Actor, OrderDetails
from agent.settings import DEMO_CUSTOMER, AgentSettings
from agent.stores import domain
from agent.stores.databases import database_for
from agent.stores.domain import DomainStore
from agent.stores.ledger import Ledger, LedgerRefund


async def refunds_made(settings: AgentSettings) -> list[LedgerRefund]:
    """Every refund a conversation made: the seed's earlier refund (no workflow) left out."""
    return [r for r in await Ledger(database_for(settings)).all_refunds() if r.workflow_id]


async def place_order(
    settings: AgentSettings,
    order_number: str,
    *,
    item: str = "desk fan",
    amount_cents: int = 2500,
    customer_id: str = DEMO_CUSTOMER,
    paid: bool = True,
) -> str:
    """A delivered order bought three days ago, paid in the offline ledger unless `paid` is
    False; returns its payment reference."""
    payment_ref = f"pi_test_{order_number}"
    database = database_for(settings)
    async with database.connect(domain.SCHEMA) as db:
        await db.execute(
            "INSERT INTO orders (order_number, customer_id, item, amount_cents, currency, status, "
            "purchased_at, final_sale, payment_ref) "
            "VALUES (?, ?, ?, ?, 'usd', 'delivered', ?, 0, ?)",
            order_number,
            customer_id,
            item,
            amount_cents,
            (date.today() - timedelta(days=3)).isoformat(),
            payment_ref,
        )
    if paid:
        await Ledger(database).seed_payments([(payment_ref, amount_cents, "usd")])
    return payment_ref


async def fresh_customer(settings: AgentSettings, account: Actor) -> str:
    """A new customer with the demo customer's name and tenure and none of their orders, linked
    to `account`: their refund history is what the test gives them, nothing more."""
    return await DomainStore(database_for(settings)).place_customer(DEMO_CUSTOMER, account)


async def place_like(
    settings: AgentSettings, like: domain.SeedOrder, *, refunded: bool = False
) -> OrderDetails:
    """An order shaped like `like` (its customer, item, amount, status, age, final sale) under the
    next free number, paid in the offline ledger; already refunded there when `refunded`."""
    database = database_for(settings)
    order = await DomainStore(database).place_order(like)
    ledger = Ledger(database)
    await ledger.seed_payments([(order.payment_ref, order.amount_cents, order.currency)])
    if refunded:
        await ledger.create_refund(
            idempotency_key=f"earlier-{order.payment_ref}",
            payment_ref=order.payment_ref,
            amount_cents=order.amount_cents,
            currency=order.currency,
            workflow_id="",
            order_number=order.order_number,
        )
    return order

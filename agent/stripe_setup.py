"""`refund-bot stripe-setup`: give the demo orders real Stripe test-mode payments (and refunds).

    refund-bot stripe-setup -> per demo order: PaymentIntent (test card) [-> its earlier refund]

The seed's orders are paid with `pi_demo_…` references that only the offline ledger knows. In
Stripe test mode a refund needs a PaymentIntent that exists in your test account, so this creates
one per demo order (confirmed with Stripe's test card `pm_card_visa`, metadata naming the order)
and points the order at it. The demo customer's earlier refund is made at Stripe too, since Stripe
then owns refund history: the customer's prior refunds are counted there. Idempotent: each
PaymentIntent and refund is created with a key derived from the order, and an order already
pointing at a real PaymentIntent is left alone.
"""

from __future__ import annotations

from agent.models import OrderDetails
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from agent.stores.domain import DomainStore, demo_refunds
from agent.stores.ledger import SeedRefund
from agent.stripe_client import stripe_client

METADATA = {"source": "refund-bot demo"}


async def create_test_payments(settings: AgentSettings) -> list[tuple[str, str]]:
    """(order number, PaymentIntent id) for every order that was paid offline only."""
    domain = DomainStore(database_for(settings))
    await domain.seed()
    refunded = {r.order_number: r for r in demo_refunds()}
    return [
        (
            order.order_number,
            await pay_order(settings, domain, order, refunded.get(order.order_number)),
        )
        for order in await domain.orders_paid_offline()
    ]


async def pay_order(
    settings: AgentSettings,
    domain: DomainStore,
    order: OrderDetails,
    earlier_refund: SeedRefund | None = None,
) -> str:
    """Pay `order` with a confirmed test-mode PaymentIntent (and make its seeded earlier refund, if
    it has one) and point the order at it."""
    reference = order.payment_ref.removeprefix("pi_demo_")
    async with stripe_client(settings) as client:
        intent = await client.v1.payment_intents.create_async(
            params={
                "amount": order.amount_cents,
                "currency": order.currency,
                "payment_method": "pm_card_visa",
                "confirm": True,
                "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
                "metadata": METADATA | {"order_number": order.order_number},
            },
            # A seed order's key is its number; a placed order's carries its random suffix too.
            options={"idempotency_key": f"refund-bot-demo-payment-{reference}"},
        )
        if earlier_refund is not None:
            # Before the order points at the payment: a failure here is retried by a re-run.
            await client.v1.refunds.create_async(
                params={
                    "payment_intent": intent.id,
                    "amount": earlier_refund.amount_cents,
                    "reason": "requested_by_customer",
                    "metadata": METADATA | {"order_number": order.order_number},
                },
                options={"idempotency_key": earlier_refund.idempotency_key},
            )
    await domain.set_payment_ref(order.order_number, intent.id)
    return intent.id

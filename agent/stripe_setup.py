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

from agent.settings import AgentSettings
from agent.stores.domain import DomainStore, demo_refunds
from agent.stripe_client import stripe_client

METADATA = {"source": "refund-bot demo"}


async def create_test_payments(settings: AgentSettings) -> list[tuple[str, str]]:
    """(order number, PaymentIntent id) for every order that was paid offline only."""
    domain = DomainStore(settings.domain_db)
    await domain.seed()
    refunded = {r.order_number: r for r in demo_refunds()}
    created = []
    async with stripe_client(settings) as client:
        for order in await domain.orders_paid_offline():
            intent = await client.v1.payment_intents.create_async(
                params={
                    "amount": order.amount_cents,
                    "currency": order.currency,
                    "payment_method": "pm_card_visa",
                    "confirm": True,
                    "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
                    "metadata": METADATA | {"order_number": order.order_number},
                },
                options={"idempotency_key": f"refund-bot-demo-payment-{order.order_number}"},
            )
            if (seed := refunded.get(order.order_number)) is not None:
                # Before the order points at the payment: a failure here is retried by a re-run.
                await client.v1.refunds.create_async(
                    params={
                        "payment_intent": intent.id,
                        "amount": seed.amount_cents,
                        "reason": "requested_by_customer",
                        "metadata": METADATA | {"order_number": order.order_number},
                    },
                    options={"idempotency_key": seed.idempotency_key},
                )
            await domain.set_payment_ref(order.order_number, intent.id)
            created.append((order.order_number, intent.id))
    return created

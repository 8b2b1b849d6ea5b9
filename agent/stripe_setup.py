"""`refund-bot stripe-setup`: give the demo orders real Stripe test-mode payments.

The seed's orders are paid with `pi_demo_…` references that only the offline ledger knows. In
Stripe test mode a refund needs a PaymentIntent that exists in your test account, so this creates
one per demo order (confirmed with Stripe's test card `pm_card_visa`, metadata naming the order)
and points the order at it. Idempotent: each PaymentIntent is created with a key derived from the
order, and an order already pointing at a real PaymentIntent is left alone.
"""

from __future__ import annotations

from agent.models import OrderDetails
from agent.settings import AgentSettings
from agent.stores.domain import DomainStore
from agent.stripe_client import stripe_client


async def create_test_payments(settings: AgentSettings) -> list[tuple[str, str]]:
    """(order number, PaymentIntent id) for every order that was paid offline only."""
    domain = DomainStore(settings.domain_db)
    await domain.seed()
    return [
        (order.order_number, await pay_order(settings, domain, order))
        for order in await domain.orders_paid_offline()
    ]


async def pay_order(settings: AgentSettings, domain: DomainStore, order: OrderDetails) -> str:
    """Pay `order` with a confirmed test-mode PaymentIntent and point the order at it."""
    reference = order.payment_ref.removeprefix("pi_demo_")
    async with stripe_client(settings) as client:
        intent = await client.v1.payment_intents.create_async(
            params={
                "amount": order.amount_cents,
                "currency": order.currency,
                "payment_method": "pm_card_visa",
                "confirm": True,
                "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
                "metadata": {"order_number": order.order_number, "source": "refund-bot demo"},
            },
            # A seed order's key is its number; a placed order's carries its random suffix too.
            options={"idempotency_key": f"refund-bot-demo-payment-{reference}"},
        )
    await domain.set_payment_ref(order.order_number, intent.id)
    return intent.id

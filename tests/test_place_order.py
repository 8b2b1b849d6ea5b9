"""A placed order: a new number after every other, on the customer's account, payable once."""

from __future__ import annotations

import asyncio

from agent.models import Actor
from agent.stores.domain import FIRST_PLACED_ORDER, SEED_ORDERS, DomainStore
from agent.stores.sqlite import SqliteDatabase

CUSTOMER = Actor(platform="local", user_id="customer")  # the seed links it to the demo customer
PLUSH_PYTHON = next(order for order in SEED_ORDERS if order.order_number == "1234")


async def test_placed_orders_take_new_numbers_on_the_customers_account(tmp_path) -> None:
    domain = DomainStore(SqliteDatabase(tmp_path))
    await domain.seed()
    first = await domain.place_order(PLUSH_PYTHON)
    # Placed at once, as two demo runs on one data directory could: never one number for both.
    second, third = await asyncio.gather(
        domain.place_order(PLUSH_PYTHON), domain.place_order(PLUSH_PYTHON)
    )
    numbers = [first.order_number, second.order_number, third.order_number]
    assert first.order_number == str(FIRST_PLACED_ORDER)
    assert sorted(numbers) == [str(FIRST_PLACED_ORDER + n) for n in range(3)]
    assert (first.item, first.amount_cents, first.status) == ("plush python", 8000, "delivered")
    # Each payment reference is its own, so a Stripe idempotency key derived from it is too.
    assert len({first.payment_ref, second.payment_ref, third.payment_ref}) == 3
    for order in (first, second, third):
        assert order.payment_ref.startswith(f"pi_demo_{order.order_number}_")
    assert await domain.order_for(first.order_number, CUSTOMER) == first
    assert (first.payment_ref, 8000, "usd") in await domain.payments()
    # Still unpaid in Stripe terms: `refund-bot stripe-setup` would pay it like a seed order.
    assert first.order_number in {o.order_number for o in await domain.orders_paid_offline()}

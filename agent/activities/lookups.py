"""The lookup tools: copies of domain state and of the owner's refunds, for working memory.

    lookup_order            -> domain store (the order) + effect owner (its refunds)
    lookup_customer_history -> domain store (customer, orders) + effect owner (their refunds)

Which refunds were made is asked of the owner every time (the offline ledger or Stripe), so the
agent's own refunds count as soon as they exist, and no copy beside the owner can fall behind.
"""

from __future__ import annotations

from datetime import date

from temporalio import activity

from agent import rules
from agent.effect_owner import EffectOwner
from agent.models import (
    CustomerHistory,
    HistoryLookup,
    LookupCustomerInput,
    LookupOrderInput,
    OrderLookup,
    PolicyCheck,
    PolicyInput,
    PolicyLookup,
)
from agent.stores.domain import DomainStore

RETURN_REQUIRED_ABOVE_CENTS = 10000
# Working memory is re-sent on every turn: a customer's history lists this many refunds at most
# (the most recent), and counts them all.
MAX_REFUND_LINES = 10


class LookupActivities:
    def __init__(self, domain: DomainStore, owner: EffectOwner) -> None:
        self._domain = domain
        self._owner = owner

    @activity.defn
    async def lookup_order(self, request: LookupOrderInput) -> OrderLookup:
        order = await self._domain.order_for(request.order_number, request.customer)
        if order is not None:
            order = order.model_copy(
                update={"refunds": await self._owner.refunds_of([order.payment_ref])}
            )
        activity.logger.info(
            "MEMORY COPY | lookup_order %s: %s",
            request.order_number,
            "none" if order is None else f"found, {len(order.refunds)} refund(s) at the owner",
        )
        return OrderLookup(order_number=request.order_number, order=order)

    @activity.defn
    async def lookup_customer_history(self, request: LookupCustomerInput) -> HistoryLookup:
        account = await self._domain.account(request.customer)
        if account is None:
            return HistoryLookup(history=None)
        orders = {o.payment_ref: o for o in account.orders}
        refunds = await self._owner.refunds_of(list(orders))
        return HistoryLookup(
            history=CustomerHistory(
                customer_id=account.customer_id,
                display_name=account.display_name,
                tenure_days=(date.today() - account.customer_since).days,
                orders=len(account.orders),
                prior_refunds=[
                    f"{r.refunded_on}, order {orders[r.payment_ref].order_number} "
                    f"({orders[r.payment_ref].item}), ${r.amount_cents / 100:,.2f}, {r.refund_id}"
                    for r in refunds[-MAX_REFUND_LINES:]
                ],
                prior_refund_count=len(refunds),
                refunded_orders={
                    orders[r.payment_ref].order_number: r for r in reversed(refunds)
                },  # oldest last, so each order keeps its first refund
            )
        )

    @activity.defn
    async def check_refund_policy(self, request: PolicyInput) -> PolicyLookup:
        order = await self._domain.order_for(request.order_number, request.customer)
        if order is None:
            return PolicyLookup(policy=None)
        asked_on = request.asked_on or date.today()
        refusal = rules.eligibility(order, asked_on)
        age = (asked_on - date.fromisoformat(order.purchased_at)).days
        return PolicyLookup(
            policy=PolicyCheck(
                order_number=order.order_number,
                eligible=refusal is None,
                return_required=order.amount_cents > RETURN_REQUIRED_ABOVE_CENTS,
                reason=refusal.reason
                if refusal
                else f"eligible: bought {age} days ago, within the refund window",
            )
        )

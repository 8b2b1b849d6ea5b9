"""The lookup tools: copies of domain state for the agent's working memory."""

from __future__ import annotations

from datetime import date

from temporalio import activity

from agent.models import (
    HistoryLookup,
    LookupCustomerInput,
    LookupOrderInput,
    OrderLookup,
    PolicyCheck,
    PolicyInput,
    PolicyLookup,
)
from agent.stores.domain import DomainStore

REFUND_WINDOW_DAYS = 30
RETURN_REQUIRED_ABOVE_CENTS = 10000


class LookupActivities:
    def __init__(self, domain: DomainStore) -> None:
        self._domain = domain

    @activity.defn
    async def lookup_order(self, request: LookupOrderInput) -> OrderLookup:
        order = await self._domain.order_for(request.order_number, request.customer)
        activity.logger.info(
            "MEMORY COPY | lookup_order %s: %s", request.order_number, "found" if order else "none"
        )
        return OrderLookup(order_number=request.order_number, order=order)

    @activity.defn
    async def lookup_customer_history(self, request: LookupCustomerInput) -> HistoryLookup:
        return HistoryLookup(history=await self._domain.history_for(request.customer))

    @activity.defn
    async def check_refund_policy(self, request: PolicyInput) -> PolicyLookup:
        order = await self._domain.order_for(request.order_number, request.customer)
        if order is None:
            return PolicyLookup(policy=None)
        age = (date.today() - date.fromisoformat(order.purchased_at)).days
        if order.final_sale:
            eligible, reason = False, "final-sale items cannot be refunded"
        elif age > REFUND_WINDOW_DAYS:
            eligible, reason = False, f"it is outside the {REFUND_WINDOW_DAYS}-day refund window"
        else:
            eligible, reason = True, f"eligible: bought {age} days ago, within the refund window"
        return PolicyLookup(
            policy=PolicyCheck(
                order_number=order.order_number,
                eligible=eligible,
                return_required=order.amount_cents > RETURN_REQUIRED_ABOVE_CENTS,
                reason=reason,
            )
        )

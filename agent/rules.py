"""The refund rules: whether money may move, decided from the owner's records.

    decider's proposal + the order and history lookups + the day the request was made
        -> Verdict (approve | escalate | deny, the rule, the agent's own sentence) -> Disposition

Pure and deterministic. The offline decider decides with them, and the Workflow applies them again
to every decider's proposal, the model's included (apply_refund_rules, a recorded step): a model
may only choose within what they allow. Their sentences are what a customer reads; a model's words
never are.
"""

from __future__ import annotations

from datetime import date

from pydantic import BaseModel, ConfigDict

from agent.models import CustomerHistory, Disposition, OrderDetails, Outcome, OwnerRefund, RuleId

# Refunds at or below this clear without a person, for customers with at most one prior refund.
AUTO_APPROVE_LIMIT_CENTS = 10000
MAX_PRIOR_REFUNDS_FOR_AUTO = 1
# Days after purchase within which an order may be refunded (counted to the day it was asked).
REFUND_WINDOW_DAYS = 30


class Verdict(BaseModel):
    """What the rules allow for this order: the most that may happen, and why."""

    model_config = ConfigDict(frozen=True)

    outcome: Outcome
    rule: RuleId
    reason: str  # the agent's own sentence, safe to show a customer


def _money(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def already_refunded(order_number: str, refund: OwnerRefund) -> str:
    """The answer to a request for an order the owner has already refunded (date and reference
    from the owner), the same whether the lookup saw it or the owner refused the refund."""
    return (
        f"Order {order_number} was already refunded on {refund.refunded_on} "
        f"(reference {refund.refund_id})."
    )


def eligibility(order: OrderDetails, asked_on: date) -> Verdict | None:
    """Why this order may not be refunded at all, from the order alone; None if it may be."""
    number = order.order_number
    if order.refunds:
        return Verdict(
            outcome="deny",
            rule="already_refunded",
            reason=already_refunded(number, order.refunds[0]),
        )
    if order.final_sale:
        return Verdict(
            outcome="deny",
            rule="final_sale",
            reason=f"Order {number} was a final-sale item, and final-sale items cannot be "
            "refunded.",
        )
    if order.status != "delivered":
        return Verdict(
            outcome="deny",
            rule="not_delivered",
            reason=f"Order {number} has not been delivered yet ({order.status}).",
        )
    age = (asked_on - date.fromisoformat(order.purchased_at)).days
    if age > REFUND_WINDOW_DAYS:
        return Verdict(
            outcome="deny",
            rule="outside_refund_window",
            reason=f"Order {number} was bought {age} days ago, outside the "
            f"{REFUND_WINDOW_DAYS}-day refund window.",
        )
    return None


def verdict(
    order_number: str | None,
    order: OrderDetails | None,
    history: CustomerHistory | None,
    asked_on: date,
) -> Verdict:
    """The most the rules allow for this request, from the owner's records of this conversation:
    the order (domain store, with its refunds read from the effect's owner) and the customer's
    history (the owner's refunds, read after the order)."""
    if order_number is None:
        return Verdict(
            outcome="deny",
            rule="no_order_number",
            reason="I still couldn't find an order number. Please write again with it, for "
            "example: please refund order 1234.",
        )
    if order is None:
        return Verdict(
            outcome="deny",
            rule="unknown_order",
            reason=f"I couldn't find order {order_number} on your account.",
        )
    if refusal := eligibility(order, asked_on):
        return refusal
    # A refund another conversation made after this one's order lookup: the owner's later word.
    earlier = history.refunded_orders.get(order.order_number) if history else None
    if earlier is not None:
        return Verdict(
            outcome="deny",
            rule="already_refunded",
            reason=already_refunded(order.order_number, earlier),
        )
    if history is None:
        return Verdict(
            outcome="escalate",
            rule="history_unknown",
            reason="I couldn't read the customer's refund history, so a support agent decides.",
        )
    if order.amount_cents > AUTO_APPROVE_LIMIT_CENTS:
        return Verdict(
            outcome="escalate",
            rule="over_agent_limit",
            reason=f"{_money(order.amount_cents)} is above the agent's "
            f"{_money(AUTO_APPROVE_LIMIT_CENTS)} limit, so a support agent must approve it.",
        )
    prior = history.refund_count
    if prior > MAX_PRIOR_REFUNDS_FOR_AUTO:
        return Verdict(
            outcome="escalate",
            rule="prior_refunds",
            reason=f"The customer has {prior} prior refunds, so a support agent should confirm.",
        )
    return Verdict(
        outcome="approve",
        rule="eligible",
        reason=f"{_money(order.amount_cents)} is within the auto-approve limit and the customer "
        f"has {prior} prior refund{'s' if prior != 1 else ''}.",
    )


# What an escalation says when the rules would have refunded but the decider did not approve.
DECIDER_ASKED_FOR_A_PERSON = (
    "The refund rules allow it, and I'd like a support agent to confirm it before I refund."
)


def dispose(proposal: Outcome | None, found: Verdict, decider: str) -> Disposition:
    """The rules' answer to a proposal.

    A deny of the rules is final, whatever was proposed. Where the rules ask for a person, a
    person decides. Where they would refund on their own, only an approval refunds at once: a
    proposed escalation or denial (or nothing usable) goes to a person, so nobody is turned away
    on a decider's word alone.
    """
    if found.outcome == "approve" and proposal != "approve":
        return Disposition(
            outcome="escalate",
            rule=found.rule,
            reason=DECIDER_ASKED_FOR_A_PERSON,
            proposal=proposal,
            decider=decider,
        )
    return Disposition(
        outcome=found.outcome,
        rule=found.rule,
        reason=found.reason,
        proposal=proposal,
        decider=decider,
    )

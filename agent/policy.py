"""The offline decision policy: the deterministic stand-in for a model.

Pure and deterministic: it reads the opening text and the working memory and returns the next
step. It asks for the order number unless the opening text has one, then whether the package was
opened and what was damaged, then looks up the order and the customer's history (together), and
decides. Tool arguments are never chosen here: the Workflow takes them from the conversation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agent.models import (
    AgentStep,
    Answer,
    HistoryLookup,
    Observation,
    OrderLookup,
    OwnerRefund,
    PolicyLookup,
)

# Refunds at or below this clear without a human, for customers with at most one prior refund.
AUTO_APPROVE_LIMIT_CENTS = 10000
MAX_PRIOR_REFUNDS_FOR_AUTO = 1
# After this many answers without an order number, the agent stops asking and says so.
MAX_ORDER_NUMBER_ASKS = 3

QUESTIONS: dict[str, str] = {
    "order_number": "Which order would you like refunded? Please send the order number.",
    "item_opened": "Was the package opened?",
    "damage": "What was damaged?",
}
ORDER_NUMBER_RETRY = (
    "I couldn't find an order number in that. Which order should I refund? "
    "(digits only, for example 1234)"
)
# Every text the agent asks a customer with (the live model asks with these too): what a platform
# that keeps no kind beside a post (Discord) reads a question by.
ASKED_TEXTS = frozenset({*QUESTIONS.values(), ORDER_NUMBER_RETRY})

# A standalone run of 3 to 12 digits, or one right after "#": not part of a word, a phone number
# (555-0100) or a decimal (2.50); a full stop after it ends a sentence.
_ORDER_NUMBER = re.compile(r"(?:#|(?<![\w\-.]))(\d{3,12})(?![\w\-]|\.\d)")


def find_order_number(text: str) -> str | None:
    """The first standalone number of 3 to 12 digits ("order 1234", "#1234"), if any."""
    match = _ORDER_NUMBER.search(text)
    return match.group(1) if match else None


def order_number_from(opening_text: str, memory: Sequence[Observation]) -> str | None:
    found = find_order_number(opening_text)
    for obs in memory:
        if isinstance(obs, Answer) and obs.question_id == "order_number":
            found = find_order_number(obs.text) or found
    return found


def _answered(memory: Sequence[Observation], question_id: str) -> list[Answer]:
    return [o for o in memory if isinstance(o, Answer) and o.question_id == question_id]


def _ask(question_id: str, question: str | None = None) -> AgentStep:
    return AgentStep(
        action="ask", question_id=question_id, question=question or QUESTIONS[question_id]
    )


def _money(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def already_refunded(order_number: str, refund: OwnerRefund) -> str:
    """The answer to a request for an order the owner has already refunded (date and reference
    from the owner), the same whether the lookup saw it or the owner refused the refund."""
    return (
        f"Order {order_number} was already refunded on {refund.refunded_on} "
        f"(reference {refund.refund_id})."
    )


def next_step(opening_text: str, memory: Sequence[Observation]) -> AgentStep:
    order_number = order_number_from(opening_text, memory)
    if order_number is None:
        asked = _answered(memory, "order_number")
        if len(asked) >= MAX_ORDER_NUMBER_ASKS:
            return AgentStep(
                action="decide",
                outcome="deny",
                rationale="I still couldn't find an order number. Please write again with it, "
                "for example: please refund order 1234.",
            )
        return _ask("order_number", ORDER_NUMBER_RETRY if asked else None)
    for question_id in ("item_opened", "damage"):
        if not _answered(memory, question_id):
            return _ask(question_id)

    order_lookup = next((o for o in memory if isinstance(o, OrderLookup)), None)
    history_lookup = next((o for o in memory if isinstance(o, HistoryLookup)), None)
    if order_lookup is None:
        # The customer's history does not depend on the order: both are read at once.
        also = () if history_lookup else ("lookup_customer_history",)
        return AgentStep(action="lookup", tool="lookup_order", parallel_tools=also)
    order = order_lookup.order
    if order is None:
        return AgentStep(
            action="decide",
            outcome="deny",
            rationale=f"I couldn't find order {order_lookup.order_number} on your account.",
        )

    if order.refunds:
        return AgentStep(
            action="decide",
            outcome="deny",
            rationale=already_refunded(order.order_number, order.refunds[0]),
        )

    if history_lookup is None:  # the live model looked up the order on its own
        return AgentStep(action="lookup", tool="lookup_customer_history")

    history = history_lookup.history
    # A refund another conversation made after this one's order lookup: the owner's later word.
    earlier = history.refunded_orders.get(order.order_number) if history else None
    if earlier is not None:
        return AgentStep(
            action="decide", outcome="deny", rationale=already_refunded(order.order_number, earlier)
        )

    if order.status != "delivered":
        return AgentStep(
            action="decide",
            outcome="deny",
            rationale=f"Order {order.order_number} has not been delivered yet ({order.status}).",
        )

    prior = history.refund_count if history else MAX_PRIOR_REFUNDS_FOR_AUTO + 1
    if (
        order.amount_cents <= AUTO_APPROVE_LIMIT_CENTS
        and prior <= MAX_PRIOR_REFUNDS_FOR_AUTO
        and not order.final_sale
    ):
        return AgentStep(
            action="decide",
            outcome="approve",
            rationale=(
                f"{_money(order.amount_cents)} is within the auto-approve limit and the customer "
                f"has {prior} prior refund{'s' if prior != 1 else ''}."
            ),
        )

    policy_lookup = next((o for o in memory if isinstance(o, PolicyLookup)), None)
    if policy_lookup is None:
        return AgentStep(action="lookup", tool="check_refund_policy")
    policy = policy_lookup.policy
    if policy is None or not policy.eligible:
        reason = policy.reason if policy else "the refund policy could not be checked"
        return AgentStep(
            action="decide", outcome="deny", rationale=f"Order {order.order_number}: {reason}."
        )
    return AgentStep(
        action="decide",
        outcome="escalate",
        rationale=(
            f"{_money(order.amount_cents)} is above the agent's {_money(AUTO_APPROVE_LIMIT_CENTS)} "
            "limit, so a support agent must approve it."
            if order.amount_cents > AUTO_APPROVE_LIMIT_CENTS
            else f"The customer has {prior} prior refunds, so a support agent should confirm."
        ),
    )

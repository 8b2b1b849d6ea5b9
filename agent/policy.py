"""The offline decision policy: the deterministic stand-in for a model.

    opening text + working memory -> ask | look up | the refund rules' decision (agent.rules)

Pure and deterministic. It asks for the order number unless the customer gave one (which order,
when their words hold more than one number and none named as the order), looks up the
order and the customer's history (together), answers at once when the rules refuse the order, asks
whether the package was opened and what was damaged only where the customer's own words do not say
(agent/known_answers.py), and decides as the rules say. Tool arguments are never chosen here: the
Workflow takes them from the conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from agent import order_numbers, rules
from agent.known_answers import known_answers
from agent.models import (
    AgentStep,
    Answer,
    HistoryLookup,
    Observation,
    OrderLookup,
    OrderRule,
    PolicyLookup,
)
from agent.order_numbers import first_number

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
WHICH_ORDER = (
    "Your message has more than one number in it. Which one is the order you'd like refunded? "
    "Please send just the order number."
)
# Every text the agent asks a customer with (the live model asks with these too): what a platform
# that keeps no kind beside a post (Discord) reads a question by.
ASKED_TEXTS = frozenset({*QUESTIONS.values(), ORDER_NUMBER_RETRY, WHICH_ORDER})


def find_order_number(text: str, rule: OrderRule = "named") -> str | None:
    """The order `text` names (agent/order_numbers.py), if it names one."""
    return order_numbers.find_order_number(text) if rule == "named" else first_number(text)


def order_number_from(
    opening_text: str, memory: Sequence[Observation], rule: OrderRule = "named"
) -> str | None:
    """The order the customer named: in the opening message, or the latest answer naming one."""
    found = find_order_number(opening_text, rule)
    for obs in memory:
        if isinstance(obs, Answer) and obs.question_id == "order_number":
            found = find_order_number(obs.text, rule) or found
    return found


def order_question(opening_text: str, memory: Sequence[Observation]) -> str:
    """How the order number is asked for: the first time, after an answer that named none, or
    after words with more than one number and none named as the order."""
    asked = _answered(memory, "order_number")
    latest = asked[-1].text if asked else opening_text
    if len(order_numbers.order_number_candidates(latest)) > 1:
        return WHICH_ORDER
    return ORDER_NUMBER_RETRY if asked else QUESTIONS["order_number"]


def customer_words(opening_text: str, memory: Sequence[Observation]) -> list[str]:
    """Everything the customer wrote that the conversation kept, earliest first."""
    return [opening_text, *(o.text for o in memory if isinstance(o, Answer))]


def _answered(memory: Sequence[Observation], question_id: str) -> list[Answer]:
    return [o for o in memory if isinstance(o, Answer) and o.question_id == question_id]


def _ask(question_id: str, question: str | None = None) -> AgentStep:
    return AgentStep(
        action="ask", question_id=question_id, question=question or QUESTIONS[question_id]
    )


def question_open(
    question_id: str,
    opening_text: str,
    memory: Sequence[Observation],
    rule: OrderRule = "named",
) -> AgentStep | None:
    """The agent's own question for `question_id`, asked by another decider (the live model), or
    None where this policy would not ask it: the order number once it is known or after
    MAX_ORDER_NUMBER_ASKS answers; whether it was opened, or what was damaged, once answered in an
    answer or in the customer's own words."""
    if question_id == "order_number":
        known = order_number_from(opening_text, memory, rule) is not None
        if known or len(_answered(memory, question_id)) >= MAX_ORDER_NUMBER_ASKS:
            return None
        return _ask(question_id, order_question(opening_text, memory))
    if question_id not in ("item_opened", "damage") or _answered(memory, question_id):
        return None
    if question_id in known_answers(customer_words(opening_text, memory)):
        return None
    return _ask(question_id)


def next_step(
    opening_text: str,
    memory: Sequence[Observation],
    asked_on: date | None = None,
    rule: OrderRule = "named",
) -> AgentStep:
    """The next step: the order number if it is missing, then the lookups, then an answer at once
    if the rules refuse the order, then the questions the customer has not answered yet, then the
    refund rules' decision (agent.rules)."""
    order_number = order_number_from(opening_text, memory, rule)
    if order_number is None:
        if len(_answered(memory, "order_number")) >= MAX_ORDER_NUMBER_ASKS:
            return _decide(rules.verdict(None, None, None, asked_on or date.today()))
        return _ask("order_number", order_question(opening_text, memory))

    order_lookup = next((o for o in memory if isinstance(o, OrderLookup)), None)
    history_lookup = next((o for o in memory if isinstance(o, HistoryLookup)), None)
    if order_lookup is None:
        # The customer's history does not depend on the order: both are read at once.
        also = () if history_lookup else ("lookup_customer_history",)
        return AgentStep(action="lookup", tool="lookup_order", parallel_tools=also)
    order = order_lookup.order
    if order is not None and history_lookup is None and not order.refunds:
        return AgentStep(action="lookup", tool="lookup_customer_history")  # the model read one
    history = history_lookup.history if history_lookup else None
    found = rules.verdict(order_lookup.order_number, order, history, asked_on or date.today())
    if found.outcome == "deny":
        return _decide(found)  # no question can change it: said at once

    known = known_answers(customer_words(opening_text, memory))
    for question_id in ("item_opened", "damage"):
        if not _answered(memory, question_id) and question_id not in known:
            return _ask(question_id)
    if found.outcome == "escalate" and not any(isinstance(o, PolicyLookup) for o in memory):
        # A person will decide: the policy's eligibility check and whether a return is required,
        # for them to read in the conversation's record.
        return AgentStep(action="lookup", tool="check_refund_policy")
    return _decide(found)


def _decide(found: rules.Verdict) -> AgentStep:
    return AgentStep(action="decide", outcome=found.outcome, rationale=found.reason)

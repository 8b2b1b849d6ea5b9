"""The offline decision policy: pure, deterministic, and the order of its questions."""

from __future__ import annotations

import pytest

from agent.models import (
    Answer,
    CustomerHistory,
    HistoryLookup,
    Observation,
    OrderDetails,
    OrderLookup,
    OwnerRefund,
    PolicyCheck,
    PolicyLookup,
    QuestionId,
)
from agent.policy import (
    ORDER_NUMBER_RETRY,
    QUESTIONS,
    WHICH_ORDER,
    find_order_number,
    next_step,
    question_open,
)


def _answer(question_id: QuestionId, text: str) -> Answer:
    return Answer(question_id=question_id, text=text, message_id=f"m-{question_id}-{text}")


def _order(number: str = "1234", cents: int = 8000, final_sale: bool = False) -> OrderLookup:
    return OrderLookup(
        order_number=number,
        order=OrderDetails(
            order_number=number,
            item="plush python",
            amount_cents=cents,
            currency="usd",
            status="delivered",
            purchased_at="2026-11-17",
            final_sale=final_sale,
            payment_ref=f"pi_demo_{number}",
        ),
    )


HISTORY = HistoryLookup(
    history=CustomerHistory(
        customer_id="cus_nyghtowl",
        display_name="Nyghtowl",
        tenure_days=824,
        orders=3,
        prior_refunds=["2025-07-17, laptop stickers, 1800 cents"],
    )
)
ANSWERS: list[Observation] = [_answer("item_opened", "Yes"), _answer("damage", "Split seam")]


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("please refund order 1234", "1234"),
        ("Refund #4500 please", "4500"),
        ("order no. 3003.", "3003"),
        ("order#7777 broke", "7777"),
        ("it cost 2.500 and arrived in a1234 box", None),
        ("my order 12 arrived", None),  # too short to be an order number
        ("call me at 555-0100 about v2.1", None),
        ("no number here", None),
    ],
)
def test_order_numbers_are_found_in_text(text: str, number: str | None) -> None:
    assert find_order_number(text) == number


@pytest.mark.parametrize(
    ("text", "number"),
    [
        # An amount is never the order: a currency code before or after it, in either case.
        ("refund USD 5000 please", None),
        ("refund EUR 5000 please", None),
        ("I paid 5000 gbp", None),
        ("jpy 5000 back please", None),
        ("refund Rs 5000", None),
        ("refund Rs. 5000", None),
        ("refund rs.5000", None),
        # Any currency sign, on either side, with or without a space.
        ("refund ₹5000", None),
        ("refund ₩ 5000", None),
        ("refund 5000 ₹", None),
        ("refund 5000₿ now", None),
        # An amount in parentheses, as a statement writes it.
        ("it was charged (5000)", None),
        # Digit groups: one number, never its last group.
        ("refund 5 000 please", None),
        ("refund 5\u2009000 please", None),
        ("refund 5\u202f000 please", None),
        ("refund 5\u00a0000 please", None),
        ("refund 1 234 567", None),
        ("refund 5'000 please", None),
        ("refund 5.000,00 please", None),
        # A number named as the order wins over any other.
        ("refund 5000 for order 1234", "1234"),
        ("refund 5000 usd for order #1234", "1234"),
        ("refund 5000 for order no. 1234", "1234"),
        ("refund 5000 for order number: 1234", "1234"),
        ("4500 is what I paid, #1234 is the order", "1234"),
        ("I paid 5 000 for order 1234", "1234"),
        ("order 1234 cost (5000)", "1234"),
        ("USD 5000 for Order No.1234.", "1234"),
        # An English word that is also a currency code, written in lower case, is a word.
        ("order 1234 all broken", "1234"),
        ("please try 1234", "1234"),
        # Two numbers and none named as the order: no order (the agent asks which).
        ("refund 5000 for 1234", None),
        ("order 1234 and order 4500", None),
        ("orders 1234 and 4500", None),
        ("refund 1234, bought 17/11/2026", "1234"),
        ("refund 1234 or 1234", "1234"),  # the same number twice is one
    ],
)
def test_amounts_are_never_order_numbers_and_a_named_order_wins(
    text: str, number: str | None
) -> None:
    assert find_order_number(text) == number


@pytest.mark.parametrize("opening", ["refund 5000 for 1234", "orders 1234 and 4500"])
def test_two_numbers_and_no_named_order_ask_which_order(opening: str) -> None:
    step = next_step(opening, [])
    assert (step.action, step.question_id, step.question) == ("ask", "order_number", WHICH_ORDER)
    step = next_step(opening, [_answer("order_number", "1234")])
    assert (step.tool, step.parallel_tools) == ("lookup_order", ("lookup_customer_history",))


def test_an_opening_whose_only_number_is_an_amount_asks_for_the_order() -> None:
    step = next_step("please refund USD 5000", [])
    assert (step.action, step.question) == ("ask", QUESTIONS["order_number"])


def test_asks_for_the_order_number_then_looks_up_then_asks_the_two_questions() -> None:
    memory: list[Observation] = []
    assert next_step("I want a refund", memory).question_id == "order_number"
    memory.append(_answer("order_number", "1234"))
    step = next_step("I want a refund", memory)
    assert (step.tool, step.parallel_tools) == ("lookup_order", ("lookup_customer_history",))
    memory += [_order(), HISTORY]
    assert next_step("I want a refund", memory).question_id == "item_opened"
    memory.append(_answer("item_opened", "Yes"))
    assert next_step("I want a refund", memory).question_id == "damage"
    memory.append(_answer("damage", "Split seam"))
    step = next_step("I want a refund", memory)
    assert (step.action, step.outcome) == ("decide", "approve")


@pytest.mark.parametrize(
    ("lookup", "says"),
    [
        (OrderLookup(order_number="9999", order=None), "couldn't find order 9999"),
        (_order("3003", 3500, final_sale=True), "final-sale"),
    ],
)
def test_an_order_the_rules_refuse_is_answered_before_any_question(lookup, says) -> None:
    number = lookup.order_number
    step = next_step(f"please refund order {number}", [lookup, HISTORY])
    assert (step.action, step.outcome) == ("decide", "deny") and says in step.rationale


def test_answers_the_customer_already_gave_are_not_asked_again() -> None:
    opening = "Please refund order 1234, I opened it and the seam is split"
    step = next_step(opening, [_order(), HISTORY])
    assert (step.action, step.outcome) == ("decide", "approve")
    # Only the missing one is asked: the damage is said, whether it was opened is not.
    step = next_step("refund order 1234, the handle snapped off", [_order(), HISTORY])
    assert step.question_id == "item_opened"
    # Any earlier answer counts too, whichever question it was given to.
    memory: list[Observation] = [
        _order(),
        HISTORY,
        _answer("item_opened", "I never opened it, the box was crushed"),
    ]
    step = next_step("refund order 1234", memory)
    assert (step.action, step.outcome) == ("decide", "approve")


def test_a_history_already_read_is_not_read_again_with_the_order() -> None:
    # The live model may look the history up first; the policy then reads only the order.
    step = next_step("refund order 1234", [*ANSWERS, HISTORY])
    assert (step.tool, step.parallel_tools) == ("lookup_order", ())


def test_the_history_is_read_when_only_the_order_was() -> None:
    step = next_step("refund order 1234", [*ANSWERS, _order()])
    assert (step.tool, step.parallel_tools) == ("lookup_customer_history", ())


def test_stops_asking_for_an_order_number_after_three_tries() -> None:
    memory: list[Observation] = [_answer("order_number", "the green one")]
    assert "couldn't find an order number" in (next_step("help", memory).question or "")
    memory += [_answer("order_number", "the big one"), _answer("order_number", "dunno")]
    step = next_step("help", memory)
    assert (step.action, step.outcome) == ("decide", "deny")


def test_large_refunds_check_policy_then_escalate() -> None:
    memory = [*ANSWERS, _order("4500", 45000), HISTORY]
    assert next_step("refund order 4500", memory).tool == "check_refund_policy"
    eligible = PolicyCheck(order_number="4500", eligible=True, return_required=True, reason="ok")
    step = next_step("refund order 4500", [*memory, PolicyLookup(policy=eligible)])
    assert step.outcome == "escalate" and "$100.00 limit" in step.rationale


def test_ineligible_orders_are_denied_and_unknown_ones_too() -> None:
    memory = [*ANSWERS, _order("3003", 3500, final_sale=True), HISTORY]
    step = next_step("refund 3003", memory)
    assert step.outcome == "deny" and "final-sale" in step.rationale
    unknown = next_step("refund 9999", [*ANSWERS, OrderLookup(order_number="9999", order=None)])
    assert unknown.outcome == "deny" and "couldn't find order 9999" in unknown.rationale


def test_the_policy_is_deterministic() -> None:
    memory = [*ANSWERS, _order(), HISTORY]
    assert next_step("refund 1234", memory) == next_step("refund 1234", list(memory))


def _refund_of_1234(refund_id: str, refunded_on: str) -> OwnerRefund:
    """Order 1234's refund, as the owner records it."""
    return OwnerRefund(
        refund_id=refund_id,
        payment_ref="pi_demo_1234",
        amount_cents=8000,
        status="succeeded",
        refunded_on=refunded_on,
    )


def test_a_refunded_order_is_denied_with_the_owners_date_and_reference() -> None:
    refund = _refund_of_1234("re_ledger_abc", "2026-11-02")
    lookup = _order()
    assert lookup.order is not None
    refunded = OrderLookup(
        order_number="1234", order=lookup.order.model_copy(update={"refunds": [refund]})
    )
    step = next_step("refund 1234", [*ANSWERS, refunded])
    assert (step.action, step.outcome) == ("decide", "deny")
    assert step.rationale == (
        "Order 1234 was already refunded on 2026-11-02 (reference re_ledger_abc)."
    )


def test_a_refund_made_after_the_order_lookup_is_seen_in_the_history_lookup() -> None:
    # Another conversation refunded order 1234 between this one's two lookups: the history
    # lookup, read later from the owner, answers "already refunded" (not an escalation for the
    # prior refund that refund itself added).
    refund = _refund_of_1234("re_ledger_won", "2026-11-30")
    assert HISTORY.history is not None
    later = HistoryLookup(
        history=HISTORY.history.model_copy(
            update={"prior_refund_count": 2, "refunded_orders": {"1234": refund}}
        )
    )
    step = next_step("refund 1234", [*ANSWERS, _order(), later])
    assert (step.action, step.outcome) == ("decide", "deny")
    assert step.rationale == (
        "Order 1234 was already refunded on 2026-11-30 (reference re_ledger_won)."
    )


def test_the_count_of_prior_refunds_decides_not_the_lines_listed() -> None:
    assert HISTORY.history is not None
    many = HistoryLookup(
        history=HISTORY.history.model_copy(update={"prior_refund_count": 12})
    )  # one line listed, twelve refunds at the owner
    step = next_step("refund 1234", [*ANSWERS, _order(), many])
    assert step.tool == "check_refund_policy"  # not auto-approved: a support agent confirms
    eligible = PolicyCheck(order_number="1234", eligible=True, return_required=False, reason="ok")
    step = next_step("refund 1234", [*ANSWERS, _order(), many, PolicyLookup(policy=eligible)])
    assert step.outcome == "escalate" and "12 prior refunds" in step.rationale


def test_a_question_another_decider_asks_is_open_only_where_the_policy_would_ask_it() -> None:
    # The order number: until it is known, and for three answers at most.
    assert question_open("order_number", "refund order 1234", []) is None
    step = question_open("order_number", "help", [_answer("order_number", "the green one")])
    assert step is not None and step.question == ORDER_NUMBER_RETRY
    three = [_answer("order_number", t) for t in ("a", "b", "c")]
    assert question_open("order_number", "help", three) is None
    # The other two: until answered, in an answer or in the customer's own words.
    step = question_open("item_opened", "refund order 1234", [])
    assert step is not None and step.question == QUESTIONS["item_opened"]
    assert question_open("item_opened", "refund order 1234", ANSWERS) is None
    assert question_open("damage", "refund order 1234, the seam is split", []) is None
    assert question_open("whatever", "refund order 1234", []) is None

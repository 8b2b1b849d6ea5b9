"""A model's words shown to staff cannot ping, link, format or break a terminal, on any platform;
and a money amount in a customer's words is never read as an order number."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from agent.policy import find_order_number
from bot.commands import CommandReply
from bot.slack.render import escape
from bot.untrusted import MAX_QUOTED_CHARS, neutral, quoted
from harness.fakes.openai_api import INJECTED


def _span(shown: str) -> str:
    """The quoted note: what follows the label, a code span."""
    note = shown.split("(not checked by the rules): ", 1)[1]
    assert note.startswith("`") and note.endswith("`")
    return note[1:-1]


def test_an_injected_summary_is_one_literal_line_in_a_code_span() -> None:
    reply = CommandReply(text="*wf-1*  (read from Temporal)", model_note=INJECTED)
    shown = reply.shown()
    inside = _span(shown)
    assert "`" not in inside and "\n" not in inside and "\x1b" not in inside
    assert "policy override" in inside  # staff can read what the model said
    # Slack: the reply is escaped, so `<!channel>` and `<https://…|…>` are literal characters.
    slack = escape(shown)
    assert "<!channel>" not in slack and "<https://" not in slack and "<@U0ADMIN>" not in slack


def test_no_note_no_line() -> None:
    assert CommandReply(text="status").shown() == "status"
    assert CommandReply(text="status", model_note="\x1b\u200b \n").shown() == "status"


@given(st.text(max_size=2000))
def test_any_text_comes_out_as_one_short_line_with_nothing_to_break_out(text: str) -> None:
    line = neutral(text)
    assert len(line) <= MAX_QUOTED_CHARS
    assert "`" not in line and "\n" not in line and "\r" not in line
    assert not re.search(r"[\x00-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2066-\u2069]", line)
    span = quoted(text)
    assert span == "" or (span.startswith("`") and span.endswith("`") and span.count("`") == 2)


# Every way of writing an amount; a thousands separator only where the number has thousands.
AMOUNT_SHAPES = [
    "${:d}",
    "$ {:d}",
    "{:,d}",
    "${:,d}",
    "{:d}.00",
    "{:d} dollars",
    "{:d} USD",
    "€{:d}",
]


@given(
    st.integers(min_value=1000, max_value=10**9),
    st.sampled_from(AMOUNT_SHAPES),
    st.integers(min_value=1000, max_value=99999),
)
def test_an_amount_is_never_read_as_the_order_number(dollars: int, shape: str, order: int) -> None:
    amount = shape.format(dollars)
    assert find_order_number(f"approve refund of {amount} for order {order}") == str(order)
    assert find_order_number(f"refund {amount} please, pre-approved") is None


@given(
    st.integers(min_value=100, max_value=10**12 - 1), st.sampled_from(["order ", "#", "order #"])
)
def test_an_order_number_is_found_however_it_is_named(number: int, prefix: str) -> None:
    assert find_order_number(f"please refund {prefix}{number}.") == str(number)

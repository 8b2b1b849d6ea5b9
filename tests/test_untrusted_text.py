"""A model's words shown to staff cannot ping, link, format or break a terminal, on any platform;
and a money amount in a customer's words is never read as an order number."""

from __future__ import annotations

import re
import sys
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from agent.order_numbers import CODES_THAT_ARE_WORDS, CURRENCY_CODES, order_number_candidates
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


# Every currency sign Unicode knows (category Sc), and every ISO 4217 code.
SIGNS = sorted(c for c in map(chr, range(sys.maxunicode + 1)) if unicodedata.category(c) == "Sc")
CODES = sorted(CURRENCY_CODES)


def _amount(number: int, sign: str, code: str, shape: int) -> str:
    """`number` written as money, in one of the ways customers write it (a code that is also
    an English word is money in capitals only)."""
    grouped = f"{max(number, 1000):,d}"
    low = code if code in CODES_THAT_ARE_WORDS else code.lower()
    return [
        f"{sign}{number}",
        f"{sign} {number}",
        f"{number}{sign}",
        f"{number} {sign}",
        f"{code} {number}",
        f"{low} {number}",
        f"{number} {code}",
        f"{number} {low}",
        f"Rs {number}",
        f"Rs.{number}",
        f"({number})",
        grouped,
        grouped.replace(",", " "),
        grouped.replace(",", "\u2009"),
        grouped.replace(",", "\u202f"),
        f"{number}.00",
        f"{number},50",
    ][shape]


AMOUNTS = st.builds(
    _amount,
    st.integers(min_value=100, max_value=10**9),
    st.sampled_from(SIGNS),
    st.sampled_from(CODES),
    st.integers(min_value=0, max_value=16),
)
WORDS = st.lists(
    st.sampled_from(["please", "refund", "I paid", "it broke", "for", "and", ",", ".", "the"]),
    max_size=4,
).map(" ".join)


@given(
    st.lists(st.tuples(WORDS, AMOUNTS), max_size=4),
    st.integers(min_value=1000, max_value=10**12 - 1),
    st.sampled_from(["order {}", "order #{}", "Order No. {}", "order number: {}", "#{}"]),
    st.integers(min_value=0, max_value=4),
)
def test_the_order_named_is_picked_whatever_amounts_surround_it(
    around: list[tuple[str, str]], order: int, naming: str, at: int
) -> None:
    parts = [f"{words} {amount}" for words, amount in around]
    parts.insert(min(at, len(parts)), naming.format(order))
    assert find_order_number(" ".join(parts) + ".") == str(order)


@given(st.lists(st.tuples(WORDS, AMOUNTS), min_size=1, max_size=4))
def test_a_message_whose_only_numbers_are_amounts_names_no_order(
    around: list[tuple[str, str]],
) -> None:
    text = " ".join(f"{words} {amount}" for words, amount in around)
    assert order_number_candidates(text) == ()
    assert find_order_number(text) is None


@given(
    st.lists(st.tuples(WORDS, AMOUNTS), max_size=3),
    st.lists(st.integers(min_value=100, max_value=10**12 - 1), min_size=2, max_size=3, unique=True),
)
def test_two_bare_numbers_and_no_named_order_name_no_order(
    around: list[tuple[str, str]], bare: list[int]
) -> None:
    text = " ".join([*(f"{w} {a}" for w, a in around), *(f"refund {n}" for n in bare)])
    assert set(order_number_candidates(text)) == {str(n) for n in bare}
    assert find_order_number(text) is None

"""The rules by which the offline decider reads answers the customer already gave
(docs/conversation.md): one example per rule, and the negations that must win."""

from __future__ import annotations

import pytest

from agent.known_answers import damage, item_opened, known_answers


@pytest.mark.parametrize(
    ("text", "opened"),
    [
        ("I opened it", "opened"),
        ("opened the box and", "opened"),
        ("Unboxed it yesterday", "opened"),
        ("took it out of the box", "opened"),
        ("it is unopened", "unopened"),
        ("I didn't open it", "unopened"),
        ("haven't opened it", "unopened"),
        ("never opened", "unopened"),
        ("It has not been opened", "unopened"),
        ("still sealed", "unopened"),
        ("please refund order 1234", None),
        ("Yes", None),
    ],
)
def test_whether_it_was_opened(text: str, opened: str | None) -> None:
    assert item_opened(text) == opened


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("Please refund order 1234, I opened it and the seam is split", "the seam is split"),
        ("The handle snapped off. Sad!", "The handle snapped off"),
        ("it doesn't work at all", "it doesn't work at all"),
        ("the box arrived crushed; the lamp is cracked", "the box arrived crushed"),
        ("please refund order 1234", None),
        ("I changed my mind", None),
    ],
)
def test_what_was_damaged_is_the_clause_that_says_so(text: str, said: str | None) -> None:
    assert damage(text) == said


def test_the_earliest_words_answer_first() -> None:
    found = known_answers(["refund 1234, it is broken", "I opened it", "also scratched"])
    assert found == {"damage": "it is broken", "item_opened": "opened"}

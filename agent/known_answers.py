"""What the customer already told us, read with plain rules: a question is asked only when its
answer is missing.

    the customer's words (the opening message, every answer, notes) -> {question id: their words}

The rules are deliberately simple and documented (docs/conversation.md), so a customer can predict
them and a test can pin them:
- item_opened: "opened", "I opened it", "unboxed", "took it out" say opened; "unopened", "not
  opened", "didn't open", "haven't opened", "never opened", "still sealed" say not opened. A
  negation wins over the word it negates.
- damage: the first clause that names damage ("split", "broken", "cracked", "torn", "snapped",
  "dented", "scratched", "leaking", "missing", "doesn't work", ...) is the answer, as written; a
  clause ends at a sentence's end, a comma or semicolon, "and" or "but".
Pure and deterministic: the offline decider runs it on every turn, and replay never needs it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_NOT_OPENED = re.compile(
    r"\b(?:un-?opened|never\s+opened|not\s+(?:been\s+)?opened|(?:did\s*n[o']?t|didnt|have\s*n[o']?t|"
    r"havent|has\s*n[o']?t|hasnt|did\s+not|have\s+not|has\s+not)\s+(?:even\s+)?open(?:ed)?|"
    r"still\s+(?:sealed|in\s+(?:the|its)\s+(?:box|packaging|wrapper)))\b",
    re.IGNORECASE,
)
_OPENED = re.compile(
    r"\b(?:opened|unboxed|open(?:ed)?\s+(?:it|the\s+(?:box|package|parcel))|took\s+it\s+out)\b",
    re.IGNORECASE,
)
_DAMAGE = re.compile(
    r"\b(?:damaged?|broken|broke|breaks?|split|splitting|torn|tore|tear|ripped|rips?|cracked|"
    r"cracks?|snapped|dented|dents?|scratched|scratch(?:es)?|shattered|smashed|crushed|bent|"
    r"chipped|leak(?:s|ed|ing)?|stained|burnt|burned|missing|defective|faulty|"
    r"(?:does\s*n[o']?t|doesnt|won[o']?t|will\s+not|does\s+not)\s+(?:work|turn\s+on|start)|"
    r"not\s+working|stopped\s+working|dead\s+on\s+arrival|hole)\b",
    re.IGNORECASE,
)
_CLAUSE_END = re.compile(r"[.!?;,\n]|\s(?:and|but)\s", re.IGNORECASE)
MAX_ANSWER_CHARS = 200


def item_opened(text: str) -> str | None:
    """'opened' or 'unopened' when the words say so; None when they do not."""
    if _NOT_OPENED.search(text):
        return "unopened"
    if _OPENED.search(text):
        return "opened"
    return None


def damage(text: str) -> str | None:
    """The first clause that names damage, as the customer wrote it; None when none does."""
    for clause in _CLAUSE_END.split(text):
        if _DAMAGE.search(clause):
            return clause.strip()[:MAX_ANSWER_CHARS]
    return None


def known_answers(words: Iterable[str]) -> dict[str, str]:
    """The intake answers the customer's words already give, earliest words first."""
    found: dict[str, str] = {}
    for text in words:
        for question_id, read in (("item_opened", item_opened), ("damage", damage)):
            if question_id not in found and (answer := read(text)) is not None:
                found[question_id] = answer
    return found

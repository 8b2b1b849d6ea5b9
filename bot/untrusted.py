"""Text nobody at the company wrote (a model's summary), made safe to show staff on any platform.

    a model's rationale -> quoted(text) -> one line, no control characters, in a code span

A code span is read literally by Slack and Discord alike: no mention pings or renders, no link is
made, no markup applies. What could break out of it (a backtick, a line break) or act on a
terminal (escape codes, bidi overrides) is removed first. A customer never sees this text at all.
"""

from __future__ import annotations

import unicodedata

# What a support agent is shown of a model's summary, at most.
MAX_QUOTED_CHARS = 300


def _shown(ch: str) -> str:
    if ch in "\t\n\r":
        return " "
    if ch == "`":
        return "'"
    # Control and format characters: terminal escapes, zero-width and bidirectional marks.
    return "" if unicodedata.category(ch) in ("Cc", "Cf") else ch


def neutral(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """One line of plain characters, cut to `limit` (an ellipsis says it was cut)."""
    line = " ".join("".join(_shown(ch) for ch in text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def quoted(text: str) -> str:
    """`text`, neutral, in a code span; empty when nothing printable is left."""
    line = neutral(text)
    return f"`{line}`" if line else ""

"""Chat markup as a terminal shows it: the words, without the marks.

    `*bold*` -> bold    `_italic_` -> italic    `<https://x|the link>` -> the link (https://x)

The commands' replies are written once for every platform in Slack's mrkdwn (Discord reads the
same `*…*` and `_…_`); a terminal would print the asterisks. Marks count only where Slack counts
them, at word edges, so `5*3*2` or `refund_approver` are left as they are. A code span is
words nobody at the company wrote (bot.untrusted): printed as it is, marks and all.
"""

from __future__ import annotations

import re

_BOLD = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_ITALIC = re.compile(r"(?<![\w_])_(?=\S)([^_\n]+?)(?<=\S)_(?![\w_])")
_LINK = re.compile(r"<((?:https?|mailto):[^|>\s]+)(?:\|([^>\n]+))?>")
_CODE_SPAN = re.compile(r"(`[^`\n]*`)")


def plain(text: str) -> str:
    # Split on code spans: the odd pieces are the spans, left untouched.
    pieces = _CODE_SPAN.split(text)
    return "".join(p if i % 2 else _marks_off(p) for i, p in enumerate(pieces))


def _marks_off(text: str) -> str:
    def link(match: re.Match[str]) -> str:
        url, label = match.group(1), match.group(2)
        return f"{label} ({url})" if label and label != url else url

    text = _LINK.sub(link, text)
    text = _BOLD.sub(r"\1", text)
    return _ITALIC.sub(r"\1", text)

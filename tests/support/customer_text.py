"""A customer's answer written to act on whoever reads it, and /refund-status as staff get it.

    HOSTILE_ANSWER -> Survivors -> bot.commands.status_reply -> each platform's command answer

Markdown, a masked link, pings, a heading on a line of its own and a terminal escape code: shown
to staff, each must arrive as the characters typed (ANSWERS_LINE), on every platform.
"""

from __future__ import annotations

from agent.effect_owner import OwnerRecord
from agent.history import RefundProgress, Survivors
from bot.commands import CommandReply, status_reply

HOSTILE_ANSWER = "**bold** [click](https://evil) @everyone <@123> <!channel>\n# heading \x1b[31mred"
# The line /refund-status gives it: one line in a code span, the escape character gone.
ANSWERS_LINE = (
    "customer answers: 1 (damage: `**bold** [click](https://evil) @everyone <@123> <!channel> "
    "# heading [31mred`)"
)


def hostile_status(workflow_id: str) -> CommandReply:
    """/refund-status's answer for a conversation whose customer answered HOSTILE_ANSWER."""
    survivors = Survivors(
        workflow_id=workflow_id,
        closed=False,
        answers={"damage": HOSTILE_ANSWER},
        lookups=["lookup_order"],
        next_action="decide",
        refund=RefundProgress(state="not started"),
        decide_calls=2,
        customer_signals=1,
    )
    return status_reply(workflow_id, survivors, OwnerRecord(owner="offline ledger", refunds=[]))

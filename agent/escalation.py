"""One escalation round as RefundConversation keeps it: the Approve / Deny post, and the click
that answered it.

    RefundConversation._offer -> EscalationRound (the post) -> _next_approval (.answer) -> _settle

It is part of the Workflow's EXECUTION STATE, rebuilt by replay like the rest. It lives here, not
in agent/workflow.py, because the workflow sandbox runs that module afresh for every conversation
it starts or replays: a dataclass declared there was built again each time (its methods generated
and compiled, about a millisecond), while this module is imported once and passed through.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.models import Approval, MessageKey


@dataclass
class EscalationRound:
    """One round's Approve / Deny post, and the click that answered it."""

    number: int
    key: MessageKey
    text: str
    message_id: str  # the platform's id for the post (post_to_thread's result)
    answer: Approval | None = None  # None while the round is open
    settled: bool = False  # its message says what became of it

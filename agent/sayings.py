"""What the agent says in a thread: its own sentences, all of them here.

    RefundConversation -> a sentence from here (+ the rules' reason) -> post_to_thread

A customer reads only these, the questions of agent/policy.py and the refund rules' reasons
(agent/rules.py): never a decider's words, never an owner's or a platform's error. Imported by the
Workflow (passed through its sandbox), so they are plain functions and constants.
"""

from __future__ import annotations

from datetime import timedelta

# Something broke for good; the detail goes to the log and Event History.
REFUND_FAILED = "I couldn't issue this refund; a support agent will follow up."
SOMETHING_WENT_WRONG = "Something went wrong on our side. A support agent will pick this up."
# To a customer who writes while the conversation says its last word (the router gives the same
# answer once the conversation has ended).
FINISHED = "This conversation has finished. Post in the support channel to start a new one."
NOT_HEARD_BACK = (
    "I haven't heard back, so I've closed this request. To start again, post in the support "
    "channel with your order number."
)
NO_DECISION = (
    "No support agent decided on this refund in time, so I've closed this request. If you "
    "still need it, post in the support channel with your order number and we'll pick it up."
)
HOLD_RAN_OUT = (
    "The hold before this refund ran out, so no refund was made. Write again to start a new "
    "request."
)
DECLINED = "A support agent declined this refund."
# A dependency of ours is down and its step waits it out.
WAITING = (
    "I'm waiting on one of our systems, which isn't answering right now. Your request will go on "
    "by itself as soon as it's back; there's no need to write again."
)
HANDED_BACK = "I'm back on this conversation and will carry on from where we were."


def money(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def duration(span: timedelta) -> str:
    """A span as a person says it: "3 days", "an hour", "90 minutes", "30 seconds"."""
    seconds = round(span.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and (seconds % size == 0 or seconds >= 2 * size):
            return _count(round(seconds / size), unit)
    return _count(seconds, "second")


def _count(count: int, unit: str) -> str:
    if count == 1:
        return "an hour" if unit == "hour" else f"a {unit}"
    return f"{count} {unit}s"


def escalated(
    order_number: str, item: str, amount_cents: int, reason: str, usual: timedelta
) -> str:
    """The escalation, with who decides and how long that usually takes."""
    return (
        f"This refund needs a support agent: order {order_number} ({item}, {money(amount_cents)})."
        f" {reason} A support agent decides; that usually takes under {duration(usual)}."
    )


def customer_reminder(question: str, left: timedelta) -> str:
    return f"Just checking in: {question} I'll keep this request open for {duration(left)} more."


def approvers_reminder(order_number: str, amount_cents: int, waited: timedelta) -> str:
    return (
        f"Reminder for the refund approvers: order {order_number} ({money(amount_cents)}) has "
        f"waited {duration(waited)} for a decision."
    )


def taken_over(name: str) -> str:
    return (
        f"{name} from our support team has taken over this conversation; I'll stay quiet until "
        "they hand it back."
    )

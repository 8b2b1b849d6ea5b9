"""How long a conversation may live: its waits, then what it may still do after the last of them.

    start ... waits, each ended by WAITS_END_AT_AGE ... the last wait
        -> one step rides out an outage (its quick retries, the thread told, outage_patience)
        -> the outcome said (its post, the escalation's edit, the post after it)
    all of it within MAX_CONVERSATION_AGE: checked against the settings at start-up
    (agent.settings), and enforced by the server as every conversation's execution timeout

The window is what docs/versioning.md counts on to remove a patch. A conversation that meets
outage after outage past its last wait could still reach it; the server then closes the run
(docs/versioning.md, "The window").
"""

from __future__ import annotations

from datetime import timedelta

from agent.models import Timing
from agent.versions import MAX_CONVERSATION_AGE, WAITS_END_AT_AGE

# A post: one try inside the workflow task that decided it (agent.workflow.LOCAL_POST_TIMEOUT at
# most), then the regular Activity's retries for up to POST_RETRIES.
POST_TRY = timedelta(seconds=5)
POST_RETRIES = timedelta(days=1)
# An edit of an escalation's message (it says what became of the round), retried this long.
EDIT_RETRIES = timedelta(hours=1)
# The longest attempt of any step (the model's step and the refund: agent.workflow).
LONGEST_ATTEMPT = timedelta(minutes=1)


def a_post() -> timedelta:
    return POST_TRY + POST_RETRIES


def riding_out_an_outage(timing: Timing) -> timedelta:
    """One step whose dependency is down: its quick retries, the thread told it waits, then its
    patient retries."""
    return timing.quick_retry + LONGEST_ATTEMPT + a_post() + timing.outage_patience


def saying_the_outcome() -> timedelta:
    """The outcome's post, the escalation's edit, and the post that answers what came meanwhile."""
    return a_post() + EDIT_RETRIES + a_post()


def longest_life(timing: Timing) -> timedelta:
    """The waits end by WAITS_END_AT_AGE; after the last, one outage and the outcome. (Every
    step after it riding out an outage of its own would not fit any useful window: those are the
    server's to end, at MAX_CONVERSATION_AGE.)"""
    return WAITS_END_AT_AGE + riding_out_an_outage(timing) + saying_the_outcome()


def longest_patience(timing: Timing) -> timedelta:
    """The longest outage_patience that keeps `timing`'s conversations inside the window."""
    return MAX_CONVERSATION_AGE - (longest_life(timing) - timing.outage_patience)


def in_words(span: timedelta) -> str:
    """5d 22h 58m: days, hours and minutes, the zeros left out (seconds only under a minute)."""
    seconds = int(span.total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    days, rest = divmod(seconds // 60, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n]
    return " ".join(parts)


def as_setting(span: timedelta) -> str:
    """`span`, rounded down to whole days, hours or minutes as a setting takes it (5d, 7h, 30m)."""
    seconds = int(span.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def too_long(timing: Timing) -> str | None:
    """One line naming the settings and the sum when `timing` lets a conversation outlive the
    window; None when it fits."""
    life = longest_life(timing)
    if life <= MAX_CONVERSATION_AGE:
        return None
    most = longest_patience(timing)
    fix = (
        f"set REFUND_OUTAGE_PATIENCE to {as_setting(most)} or less"
        if most > timing.quick_retry
        else "lower REFUND_QUICK_RETRY and REFUND_OUTAGE_PATIENCE"
    )
    return (
        f"REFUND_OUTAGE_PATIENCE={in_words(timing.outage_patience)} with "
        f"REFUND_QUICK_RETRY={in_words(timing.quick_retry)} lets a conversation live "
        f"{in_words(life)}: its waits end at {in_words(WAITS_END_AT_AGE)}, then a step may ride "
        f"out an outage for {in_words(riding_out_an_outage(timing))} and the outcome take "
        f"{in_words(saying_the_outcome())} to say, past the {in_words(MAX_CONVERSATION_AGE)} "
        f"window every conversation ends within (docs/versioning.md): {fix}"
    )

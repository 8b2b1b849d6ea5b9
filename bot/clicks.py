"""One Approve / Deny click, the same steps on every platform.

    click -> may approve? -> "checking authorization", buttons gone -> router.on_click (`approval`
          Signal) -> the notice for the result | routing failed: the buttons back, "try again"

Each platform hands `on_click` its `ClickSurface`: the clicked message and the clicker, as that
platform shows them (Slack edits blocks and answers ephemerally, Discord answers the interaction
within its 3 s, the terminal prints lines). The sequence itself lives here only.

The grant pre-check is a courtesy, so that a click that cannot count leaves the buttons for someone
who may decide: the Workflow's authorize_refund reads the grants again right before any refund and
decides. A click costs one call to Temporal, the `approval` Signal: nothing asks the Workflow first
whether the click's round is still open. The Workflow answers that itself: it drops a click whose
round has passed (buttons of an earlier escalation, a second click on one already answered) and
edits that round's message again with what became of it, so the "checking authorization" written
here over it is replaced, and that edit is what the clicker sees.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from agent import tracing
from agent.activities.authorize import GrantSource
from agent.models import Actor
from bot.conversations import InboundClick, Routed, Router

log = logging.getLogger(__name__)

# Whether an actor may approve or deny refunds right now (read live); raises when nobody could say.
ApprovalCheck = Callable[[Actor], Awaitable[bool]]

CHECKING = "checking authorization"
CLICK_FAILED = "Your click could not be handled just now; nothing changed. Please try again."
APPROVER_ROLE = "the refund_approver role"

# What the clicker is told privately, by result of the click (absent: nothing to say, the thread
# shows what happens).
CLICK_NOTICES: dict[Routed, str] = {
    Routed.QUEUED: "Your decision is recorded; the agent is briefly unavailable and will pick it "
    "up shortly.",
    Routed.CLOSED: "This conversation has already finished; your click changed nothing.",
    Routed.UNKNOWN: "This button belongs to no conversation I know; your click changed nothing.",
}
# Results after which no later edit by the Workflow will say what became of the click.
_FINAL = frozenset({Routed.CLOSED, Routed.UNKNOWN})


class ClickSurface(Protocol):
    """One platform's clicked message and its clicker, as the click flow uses them.

    Text handed here is plain; the surface renders it for its platform.
    """

    @property
    def approval_needs(self) -> str:
        """What it takes to decide here, as the clicker reads it ("the refund_approver role")."""
        ...

    async def tell(self, text: str) -> None:
        """Tell the clicker only."""
        ...

    async def checking(self) -> None:
        """The buttons gone and "<Approved|Denied> by <clicker>, checking authorization" on the
        message, so nobody presses them twice."""
        ...

    async def restore(self) -> None:
        """The message as it was before the click, its buttons back."""
        ...

    async def conclude(self, outcome: str) -> None:
        """ "<Approved|Denied> by <clicker>: <outcome>" on the message, its buttons gone."""
        ...


def approver_check(grants: GrantSource) -> ApprovalCheck:
    """The pre-check from a live grant source: holds refund_approver right now."""

    async def may_approve(actor: Actor) -> bool:
        return await grants.live_grant(actor, "refund_approver") is not None

    return may_approve


async def on_click(
    click: InboundClick,
    may_approve: ApprovalCheck | None,
    router: Router,
    surface: ClickSurface,
) -> Routed | None:
    """Handle one click; the router's result, or None when the click went nowhere (refused, its
    pre-check failed, or routing failed). Without `may_approve` every click goes to the Workflow,
    whose authorization check says the result in the thread."""
    with tracing.span(
        f"{click.actor.platform}.click",
        "server",
        platform=click.actor.platform,
        workflow_id=click.workflow_id,
        decision=click.decision,
        round=click.round,
    ) as span:
        routed = await _on_click(click, may_approve, router, surface)
        span.set(outcome=routed.value if routed is not None else "not_routed")
        return routed


async def _on_click(
    click: InboundClick,
    may_approve: ApprovalCheck | None,
    router: Router,
    surface: ClickSurface,
) -> Routed | None:
    if may_approve is not None:
        allowed = await _may_decide(may_approve, click.actor)
        if not allowed:
            refused = refusal(click.actor, surface.approval_needs)
            await surface.tell(refused if allowed is False else CLICK_FAILED)
            return None
    await surface.checking()
    try:
        routed = await router.on_click(click)
    except Exception:
        # The router keeps what it cannot deliver; this is it failing to keep the click. The
        # buttons come back so that someone can try again.
        log.exception("could not route the %s click on %s", click.decision, click.workflow_id)
        await surface.restore()
        await surface.tell(CLICK_FAILED)
        return None
    log.info(
        "%s click %s on %s: %s", click.actor.platform, click.click_id, click.workflow_id, routed
    )
    notice = CLICK_NOTICES.get(routed)
    if notice is not None:
        if routed in _FINAL:
            await surface.conclude(notice)
        await surface.tell(notice)
    return routed


def refusal(actor: Actor, needed: str = APPROVER_ROLE) -> str:
    return (
        f"Sorry {actor.label}, approving or denying a refund needs {needed}, and you don't hold "
        "it. Nothing changed."
    )


def decided_line(click: InboundClick, outcome: str | None = None, who: str | None = None) -> str:
    """ "Approved by Sam, checking authorization" (no outcome yet) or "Denied by Sam: <outcome>";
    `who` is how the platform names the clicker (a mention, say), their label otherwise."""
    verb = "Approved" if click.decision == "approve" else "Denied"
    status = f", {CHECKING}" if outcome is None else f": {outcome}"
    return f"{verb} by {who or click.actor.label}{status}"


async def _may_decide(may_approve: ApprovalCheck, actor: Actor) -> bool | None:
    """True or False from the live pre-check, None when it could not be made."""
    try:
        return await may_approve(actor)
    except Exception:
        log.exception("could not check whether %s may decide refunds", actor.user_id)
        return None

"""The Approve / Deny buttons: a persistent DynamicItem, and what a click on one does.

    Approve / Deny click -> pre-checks (may approve? round still open?) -> edit, buttons gone
                         -> router.on_click -> `approval` Signal

The Worker posts the buttons over REST (render.components_for); no View is stored anywhere. The
client registers DecisionButton as a class in setup_hook, and discord.py matches a click on its
custom id (`refund:<action>:r<round>:<workflow_id>`, or without the round for buttons posted
before rounds existed), so a click works the same after a bot restart, on any replica, however
long ago the buttons were posted.

The pre-checks are only a courtesy to the clicker: the Workflow's authorize_refund reads the grants
again before any refund and decides, and the Workflow drops a click whose round has passed. It also
replaces "checking authorization" with what happened.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import discord

from agent.activities.authorize import GrantSource
from agent.models import Actor
from bot.conversations import CLICK_NOTICES, InboundClick, Routed
from bot.discord.actors import actor_for
from bot.discord.render import (
    ACTIONS,
    CUSTOM_ID_TEMPLATE,
    Action,
    components_for,
    fit_content,
    parse_custom_id,
)
from bot.discord.replies import FAILED, NO_PINGS, finished_within, tell_privately

if TYPE_CHECKING:
    from bot.discord.client import RefundBotClient

log = logging.getLogger(__name__)

ApprovalCheck = Callable[[Actor], Awaitable[bool]]


def approver_check(grants: GrantSource) -> ApprovalCheck:
    """The click pre-check from a live grant source: holds refund_approver right now."""

    async def may_approve(actor: Actor) -> bool:
        return await grants.live_grant(actor, "refund_approver") is not None

    return may_approve


class DecisionButton(discord.ui.DynamicItem[discord.ui.Button], template=CUSTOM_ID_TEMPLATE):
    """An Approve or Deny button the Worker posted; the conversation rides in its custom id."""

    def __init__(
        self, item: discord.ui.Button, action: Action, workflow_id: str, round: int | None = None
    ) -> None:
        super().__init__(item)
        self.action: Action = action
        self.workflow_id = workflow_id
        self.round = round

    @classmethod
    def for_action(
        cls, action: Action, workflow_id: str, round: int | None = None
    ) -> DecisionButton:
        """The button exactly as the Worker posts it (label, style and custom id from render)."""
        [row] = components_for(workflow_id, [action], round)
        [spec] = row["components"]
        button: discord.ui.Button = discord.ui.Button(
            label=spec["label"],
            style=discord.ButtonStyle(spec["style"]),
            custom_id=spec["custom_id"],
        )
        return cls(button, action, workflow_id, round)

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str], /
    ) -> DecisionButton:
        parsed = parse_custom_id(match.string)
        if parsed is None or not isinstance(item, discord.ui.Button):
            raise ValueError(f"not a decision button: {match.string!r}")
        return cls(item, *parsed)

    async def callback(self, interaction: discord.Interaction[RefundBotClient]) -> None:
        # Only RefundBotClient registers this item, so interaction.client is always one.
        client = interaction.client
        action, workflow_id = self.action, self.workflow_id
        actor = actor_for(interaction.user)
        click = InboundClick(
            event_id=str(interaction.id),
            workflow_id=workflow_id,
            decision=action,
            actor=actor,
            click_id=str(interaction.id),
            round=self.round,
        )

        async def checks() -> tuple[bool | None, Routed | None]:
            allowed = await _may_decide(client.can_approve, actor)
            return allowed, (await client.router.check_click(click) if allowed else None)

        # Both pre-checks inside Discord's 3 s for the first answer, or defer.
        check = asyncio.ensure_future(checks())
        if not await finished_within(check, client.response_budget):
            await interaction.response.defer()  # DEFERRED_UPDATE_MESSAGE: no visible change
        allowed, early = await check
        if not allowed:
            text = _refusal(actor, client.settings.approver_role) if allowed is False else FAILED
            await tell_privately(interaction, text)
            return
        if early is not None:
            await tell_privately(interaction, CLICK_NOTICES[early])  # the message stays as it is
            return

        original = interaction.message.content if interaction.message else ""
        verb = "Approved" if action == "approve" else "Denied"
        # No view: the buttons go, so nobody presses them twice.
        await _edit_clicked_message(
            interaction, _append(original, f"{verb} by {actor.label}, checking authorization.")
        )
        try:
            routed = await client.router.on_click(click)
        except Exception:
            log.exception("could not route the %s click on %s", action, workflow_id)
            # Put the buttons back so that someone can try again.
            await _edit_clicked_message(interaction, original, buttons_of=(workflow_id, self.round))
            await tell_privately(interaction, FAILED)
            return
        notice = CLICK_NOTICES.get(routed)
        if notice is not None:
            if routed in (Routed.CLOSED, Routed.UNKNOWN):
                await _edit_clicked_message(
                    interaction, _append(original, f"{verb} by {actor.label}: {notice}")
                )
            await tell_privately(interaction, notice)


async def _may_decide(can_approve: ApprovalCheck, actor: Actor) -> bool | None:
    """True or False from the live pre-check, None when it could not be made."""
    try:
        return await can_approve(actor)
    except Exception:
        log.exception("could not check whether %s may approve", actor.user_id)
        return None


def _refusal(actor: Actor, approver_role: str | None) -> str:
    role = (approver_role or "").strip()
    # A role id renders as the role's name in a mention; AllowedMentions.none() keeps it quiet.
    shown = f"<@&{role}>" if role.isdigit() else role
    needed = f"the Discord role {shown}" if role else "the refund_approver role"
    return (
        f"Sorry {actor.label}, approving or denying a refund needs {needed}, and you don't "
        "hold it. Nothing changed."
    )


def _append(original: str, line: str) -> str:
    return fit_content(f"{original}\n\n{line}" if original else line)


async def _edit_clicked_message(
    interaction: discord.Interaction,
    content: str,
    *,
    buttons_of: tuple[str, int | None] | None = None,
) -> None:
    """Replace the clicked message's text; its buttons go, unless `buttons_of` (a Workflow ID and
    round) asks for Approve and Deny again."""
    view: discord.ui.View | None = None
    if buttons_of is not None:
        # DecisionButtons, not plain Buttons: discord.py stores a view sent in an edit, and for
        # DynamicItems it stores only their class, so the next click still reaches this flow.
        view = discord.ui.View(timeout=None)
        for action in ACTIONS:
            view.add_item(DecisionButton.for_action(action, *buttons_of))
    if interaction.response.is_done():
        await interaction.edit_original_response(
            content=content, view=view, allowed_mentions=NO_PINGS
        )
    else:
        # UPDATE_MESSAGE: the answer to the click is the edit itself.
        await interaction.response.edit_message(
            content=content, view=view, allowed_mentions=NO_PINGS
        )

"""Discord's Approve / Deny buttons: a persistent DynamicItem, whose click goes through the click
flow of every platform.

    Approve / Deny click -> DecisionButton.callback -> bot.clicks.on_click -> router.on_click
                         -> `approval` Signal

The Worker posts the buttons over REST (render.components_for); no View is stored anywhere. The
client registers DecisionButton as a class in setup_hook, and discord.py matches a click on its
custom id (`refund:<action>:r<round>:<workflow_id>`, or without the round for buttons posted
before rounds existed), so a click works the same after a bot restart, on any replica, however
long ago the buttons were posted.

Discord's surface for the flow (ClickedMessage) answers the interaction itself: the message edited
in place (UPDATE_MESSAGE), or an ephemeral reply; Discord waits 3 s for that first answer, so
when the flow has given none within the response budget (a slow grant check), the click is
deferred and answered later through the interaction's webhook. The steps are bot.clicks'.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import discord

from bot.clicks import APPROVER_ROLE, decided_line, on_click
from bot.conversations import InboundClick
from bot.discord.actors import actor_for
from bot.discord.parts import parts_of
from bot.discord.render import (
    ACTIONS,
    CUSTOM_ID_TEMPLATE,
    Action,
    components_for,
    fit_content,
    named,
    parse_custom_id,
)
from bot.discord.replies import NO_PINGS, finished_within, tell_privately


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

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        # Only RefundBotClient registers this item, so interaction.client carries its parts.
        parts = parts_of(interaction.client)
        if parts.router.seen(str(interaction.id)):
            # Delivered again (a RESUME replays what it likes): it has had its answer, and
            # Discord takes one per interaction.
            return
        click = InboundClick(
            event_id=str(interaction.id),
            workflow_id=self.workflow_id,
            decision=self.action,
            actor=actor_for(interaction.user),
            click_id=str(interaction.id),
            round=self.round,
        )
        surface = ClickedMessage(interaction, click, approval_needs(parts.settings.approver_role))
        flow = asyncio.ensure_future(on_click(click, parts.can_approve, parts.router, surface))
        await surface.answer_within(parts.response_budget, flow)
        await flow


class ClickedMessage:
    """The click flow's surface on Discord (a bot.clicks.ClickSurface): the clicked message and
    its clicker, both answered through the click's interaction."""

    def __init__(
        self,
        interaction: discord.Interaction[Any],
        click: InboundClick,
        approval_needs: str,
    ) -> None:
        self._interaction = interaction
        self._click = click
        self._original = interaction.message.content if interaction.message else ""
        self.approval_needs = approval_needs
        # The first answer is either the flow's or the deferral: never both.
        self._answering = asyncio.Lock()

    async def answer_within(self, seconds: float, flow: asyncio.Future[Any]) -> None:
        """Defer the click if `flow` has not answered it within `seconds`."""
        await finished_within(flow, seconds)
        async with self._answering:
            if not flow.done() and not self._interaction.response.is_done():
                await self._interaction.response.defer()  # DEFERRED_UPDATE_MESSAGE: no change

    async def tell(self, text: str) -> None:
        async with self._answering:
            await tell_privately(self._interaction, text)

    async def checking(self) -> None:
        who = named(self._click.actor)
        await self._edit(_append(self._original, decided_line(self._click, who=who) + "."))

    async def restore(self) -> None:
        await self._edit(self._original, buttons=True)

    async def conclude(self, outcome: str) -> None:
        who = named(self._click.actor)
        await self._edit(_append(self._original, decided_line(self._click, outcome, who)))

    async def _edit(self, content: str, *, buttons: bool = False) -> None:
        """Replace the clicked message's text; its buttons go, unless `buttons` asks for Approve
        and Deny again."""
        view: discord.ui.View | None = None
        if buttons:
            # DecisionButtons, not plain Buttons: discord.py stores a view sent in an edit, and
            # for DynamicItems it stores only their class, so the next click still reaches this.
            view = discord.ui.View(timeout=None)
            for action in ACTIONS:
                click = self._click
                view.add_item(DecisionButton.for_action(action, click.workflow_id, click.round))
        async with self._answering:
            if self._interaction.response.is_done():
                await self._interaction.edit_original_response(
                    content=content, view=view, allowed_mentions=NO_PINGS
                )
            else:
                # UPDATE_MESSAGE: the answer to the click is the edit itself.
                await self._interaction.response.edit_message(
                    content=content, view=view, allowed_mentions=NO_PINGS
                )


def approval_needs(approver_role: str | None) -> str:
    """What it takes to decide on Discord: the configured approver role, else the grant."""
    role = (approver_role or "").strip()
    # A role id renders as the role's name in a mention; AllowedMentions.none() keeps it quiet.
    shown = f"<@&{role}>" if role.isdigit() else role
    return f"the Discord role {shown}" if role else APPROVER_ROLE


def _append(original: str, line: str) -> str:
    return fit_content(f"{original}\n\n{line}" if original else line)

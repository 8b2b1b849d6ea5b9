"""Slack's Approve / Deny buttons: each click, acked, goes through the click flow of every platform.

    Approve / Deny button -> ack -> bot.clicks.on_click -> router.on_click -> `approval` Signal

The listener acks first (everything after may wait on Slack, the grants or Temporal), reads the
click from the block_actions payload as the edge typed it (bot.slack.requests), and hands
bot.clicks its Slack surface: the clicked message, changed with chat.update (its blocks, the
buttons replaced by who decided what), and the clicker, told with an ephemeral message. The steps
themselves, and why they are safe, are bot.clicks'. A click that reached the listener without
passing the edge and does not read is kept in the inbox as a dead letter: Slack has had its ack.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.context.respond.async_respond import AsyncRespond
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.activities.authorize import GrantSource
from agent.models import Actor
from bot.clicks import APPROVER_ROLE, approver_check, decided_line, on_click
from bot.conversations import InboundClick, Router, keep_unreadable
from bot.slack.links import conversation_prefix, thread_workflow_id
from bot.slack.render import (
    APPROVE_ACTION_ID,
    DECISION_BLOCK_ID,
    DENY_ACTION_ID,
    escape,
    parse_button_value,
)
from bot.slack.replies import post_ephemeral
from bot.slack.requests import BlockActions, MalformedRequest, typed

log = logging.getLogger(__name__)

_DECISIONS: dict[str, Literal["approve", "deny"]] = {
    APPROVE_ACTION_ID: "approve",
    DENY_ACTION_ID: "deny",
}
# The buttons' action ids: each click's listener acks with an empty 200 before its work.
DECISION_ACTIONS = frozenset(_DECISIONS)


def register_decision_actions(app: AsyncApp, router: Router, grants: GrantSource | None) -> None:
    """Route Approve / Deny clicks to `router`; with `grants`, refuse non-approvers privately."""
    may_approve = approver_check(grants) if grants is not None else None

    async def on_decision(
        ack: AsyncAck,
        body: dict[str, Any],
        context: AsyncBoltContext,
        client: AsyncWebClient,
        respond: AsyncRespond | None,
    ) -> None:
        await ack()  # first: everything below may wait on Slack, the grants or Temporal
        try:
            pressed = typed(BlockActions, context, body)
            click = inbound_click(pressed)
        except (MalformedRequest, ValidationError) as err:
            await keep_unreadable(router, "slack", "click", body, str(err).splitlines()[0])
            return
        where = click_location(pressed)
        if click is None or where is None:
            return
        surface = ClickedMessage(client, respond, pressed, where, click)
        await on_click(click, may_approve, router, surface)

    for action_id in DECISION_ACTIONS:
        app.action(action_id)(on_decision)


@dataclass
class ClickedMessage:
    """The click flow's surface on Slack (a bot.clicks.ClickSurface): the clicked message, as the
    block_actions payload carries it, and its clicker."""

    client: AsyncWebClient
    respond: AsyncRespond | None
    pressed: BlockActions
    where: tuple[str, str, str | None]  # channel, message ts, thread root ts
    click: InboundClick
    approval_needs: str = APPROVER_ROLE

    async def tell(self, text: str) -> None:
        channel, _, thread_ts = self.where
        user = self.click.actor.user_id
        await post_ephemeral(self.client, self.respond, channel, user, thread_ts, escape(text))

    async def checking(self) -> None:
        await _update_clicked(self.client, self.pressed, decided_blocks(self.pressed, self.click))

    async def restore(self) -> None:
        message = self.pressed.message
        await _update_clicked(self.client, self.pressed, message.blocks if message else None)

    async def conclude(self, outcome: str) -> None:
        await _update_clicked(
            self.client, self.pressed, decided_blocks(self.pressed, self.click, outcome)
        )


def inbound_click(pressed: BlockActions) -> InboundClick | None:
    """An Approve / Deny block_actions payload -> InboundClick, or None if it is not ours."""
    actions = [a for a in pressed.actions if a.action_id in _DECISIONS]
    user = pressed.user
    if len(actions) != 1 or not user.id:
        return None
    action = actions[0]
    workflow_id, round = parse_button_value(action.value or "")
    where = click_location(pressed)
    team_id = (pressed.team.id if pressed.team else None) or user.team_id or ""
    if where is not None and where[2] is not None:
        # The button's value names the conversation; it must be the thread the button sits in.
        expected = thread_workflow_id(team_id, where[0], where[2])
        if workflow_id != expected:
            log.warning("click on %s carries a foreign workflow id; ignored", expected)
            return None
    elif not workflow_id.startswith(conversation_prefix(team_id)):
        return None
    click_id = action.action_ts or pressed.trigger_id or ""
    return InboundClick(
        # trigger_id is unique per interaction; the router drops a repeat of the same one.
        event_id=f"slack-click-{pressed.trigger_id or click_id}",
        workflow_id=workflow_id,
        decision=_DECISIONS[action.action_id],
        actor=Actor(
            platform="slack",
            user_id=user.id,
            display_name=user.username or user.name or user.id,
        ),
        click_id=click_id,
        round=round,
    )


def decided_blocks(
    pressed: BlockActions, click: InboundClick, outcome: str | None = None
) -> list[dict[str, Any]]:
    """The clicked message's blocks with the buttons replaced by who decided what: "checking
    authorization" until there is an `outcome`."""
    blocks = (pressed.message.blocks if pressed.message else None) or []
    kept = [
        b for b in blocks if b.get("type") != "actions" and b.get("block_id") != DECISION_BLOCK_ID
    ]
    shown = None if outcome is None else escape(outcome)
    line = decided_line(click, shown, who=f"<@{click.actor.user_id}>")
    return [
        *kept,
        {
            "type": "context",
            "block_id": DECISION_BLOCK_ID,
            "elements": [{"type": "mrkdwn", "text": line}],
        },
    ]


def click_location(pressed: BlockActions) -> tuple[str, str, str | None] | None:
    """(channel, message ts, thread root ts) of the message whose button was clicked."""
    container, message = pressed.container, pressed.message
    channel = (container.channel_id if container else None) or (
        pressed.channel.id if pressed.channel else None
    )
    ts = (container.message_ts if container else None) or (message.ts if message else None)
    if not channel or not ts:
        return None
    thread = (container.thread_ts if container else None) or (
        message.thread_ts if message else None
    )
    return channel, ts, thread


async def _update_clicked(
    client: AsyncWebClient, pressed: BlockActions, blocks: list[dict[str, Any]] | None
) -> None:
    # A failed update does not stop the click: the Workflow takes one decision at a time and
    # drops a repeated click id.
    where = click_location(pressed)
    if where is None or blocks is None:
        return
    text = (pressed.message.text if pressed.message else None) or "Refund decision"
    try:
        await client.chat_update(channel=where[0], ts=where[1], text=text, blocks=blocks)
    except SlackApiError as err:
        log.warning("could not update the clicked message: %s", err.response.get("error"))

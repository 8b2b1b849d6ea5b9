"""The Approve / Deny buttons: a click becomes the Workflow's `approval` Signal.

    Approve / Deny button -> ConversationRouter.on_click -> `approval` Signal

The listener acks first, then (with a live grant source) refuses privately a click from someone
who may not decide, tells privately a click on buttons whose round has passed (answered already, or
an earlier escalation's) and leaves the message as it is, replaces the buttons with who decided
what, and routes the click. If routing fails the buttons come back, so someone can try again. The
Workflow later replaces "checking authorization" with what happened.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.respond.async_respond import AsyncRespond
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.activities.authorize import GrantSource
from agent.models import Actor
from bot.conversations import CLICK_NOTICES, ConversationRouter, InboundClick, Routed
from bot.slack.links import conversation_prefix, thread_workflow_id
from bot.slack.render import (
    APPROVE_ACTION_ID,
    DECISION_BLOCK_ID,
    DENY_ACTION_ID,
    escape,
    parse_button_value,
)
from bot.slack.replies import post_ephemeral

log = logging.getLogger(__name__)

_DECISIONS: dict[str, Literal["approve", "deny"]] = {
    APPROVE_ACTION_ID: "approve",
    DENY_ACTION_ID: "deny",
}
# The buttons' action ids: each click's listener acks with an empty 200 before its work.
DECISION_ACTIONS = frozenset(_DECISIONS)
_CLICK_FAILED = "Your click could not be handled just now; nothing changed. Please try again."
_CHECKING = "checking authorization"


def register_decision_actions(
    app: AsyncApp, router: ConversationRouter, grants: GrantSource | None
) -> None:
    """Route Approve / Deny clicks to `router`; with `grants`, refuse non-approvers privately."""

    async def on_decision(
        ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient, respond: AsyncRespond
    ) -> None:
        await ack()  # first: everything below may wait on Slack, the grants or Temporal
        click = inbound_click(body)
        where = _click_location(body)
        if click is None or where is None:
            return

        async def tell(text: str) -> None:
            await post_ephemeral(client, respond, where[0], click.actor.user_id, where[2], text)

        if grants is not None:
            # A courtesy pre-check, so a click that cannot count leaves the buttons for someone
            # who may decide. The Workflow's authorize_refund reads the grants again and decides.
            allowed = await _may_decide(grants, click.actor)
            if not allowed:
                await tell(_refusal(click.actor) if allowed is False else _CLICK_FAILED)
                return
        if (early := await router.check_click(click)) is not None:
            await tell(CLICK_NOTICES[early])  # the message stays as the Workflow left it
            return
        # The buttons go, so nobody presses them twice.
        await _update_clicked(client, body, decided_blocks(body, click, _CHECKING))
        try:
            routed = await router.on_click(click)
        except Exception:
            log.exception("could not route the %s click on %s", click.decision, click.workflow_id)
            await _update_clicked(client, body, (body.get("message") or {}).get("blocks"))
            await tell(_CLICK_FAILED)
            return
        log.info("slack click %s on %s: %s", click.click_id, click.workflow_id, routed)
        notice = CLICK_NOTICES.get(routed)
        if notice is not None:
            if routed in (Routed.CLOSED, Routed.UNKNOWN):
                await _update_clicked(client, body, decided_blocks(body, click, notice))
            await tell(notice)

    for action_id in DECISION_ACTIONS:
        app.action(action_id)(on_decision)


def inbound_click(body: dict[str, Any]) -> InboundClick | None:
    """An Approve / Deny block_actions payload -> InboundClick, or None if it is not ours."""
    actions = [a for a in body.get("actions") or [] if a.get("action_id") in _DECISIONS]
    user = body.get("user") or {}
    if len(actions) != 1 or not user.get("id"):
        return None
    action = actions[0]
    workflow_id, round = parse_button_value(str(action.get("value") or ""))
    where = _click_location(body)
    team_id = (body.get("team") or {}).get("id") or user.get("team_id") or ""
    if where is not None and where[2] is not None:
        # The button's value names the conversation; it must be the thread the button sits in.
        expected = thread_workflow_id(team_id, where[0], where[2])
        if workflow_id != expected:
            log.warning("click on %s carries a foreign workflow id; ignored", expected)
            return None
    elif not workflow_id.startswith(conversation_prefix(team_id)):
        return None
    click_id = str(action.get("action_ts") or body.get("trigger_id") or "")
    return InboundClick(
        # trigger_id is unique per interaction; the router drops a repeat of the same one.
        event_id=f"slack-click-{body.get('trigger_id') or click_id}",
        workflow_id=workflow_id,
        decision=_DECISIONS[action["action_id"]],
        actor=Actor(
            platform="slack",
            user_id=user["id"],
            display_name=user.get("username") or user.get("name") or user["id"],
        ),
        click_id=click_id,
        round=round,
    )


def decided_blocks(body: dict[str, Any], click: InboundClick, status: str) -> list[dict[str, Any]]:
    """The clicked message's blocks with the buttons replaced by who decided what."""
    kept = [
        b
        for b in (body.get("message") or {}).get("blocks") or []
        if b.get("type") != "actions" and b.get("block_id") != DECISION_BLOCK_ID
    ]
    verb = "Approved" if click.decision == "approve" else "Denied"
    separator = ", " if status == _CHECKING else ": "
    line = f"{verb} by <@{click.actor.user_id}>{separator}{escape(status)}"
    return [
        *kept,
        {
            "type": "context",
            "block_id": DECISION_BLOCK_ID,
            "elements": [{"type": "mrkdwn", "text": line}],
        },
    ]


def _click_location(body: dict[str, Any]) -> tuple[str, str, str | None] | None:
    """(channel, message ts, thread root ts) of the message whose button was clicked."""
    container = body.get("container") or {}
    message = body.get("message") or {}
    channel = container.get("channel_id") or (body.get("channel") or {}).get("id")
    ts = container.get("message_ts") or message.get("ts")
    if not channel or not ts:
        return None
    return channel, ts, container.get("thread_ts") or message.get("thread_ts")


async def _may_decide(grants: GrantSource, actor: Actor) -> bool | None:
    """True or False from the live grant source, None when it could not be asked."""
    try:
        return await grants.live_grant(actor, "refund_approver") is not None
    except Exception:
        log.exception("could not check whether %s may decide refunds", actor.user_id)
        return None


def _refusal(actor: Actor) -> str:
    return (
        f"Sorry {escape(actor.label)}, approving or denying a refund needs the refund_approver "
        "role, and you don't hold it. Nothing changed."
    )


async def _update_clicked(
    client: AsyncWebClient, body: dict[str, Any], blocks: list[dict[str, Any]] | None
) -> None:
    # A failed update does not stop the click: the Workflow takes one decision at a time and
    # drops a repeated click id.
    where = _click_location(body)
    if where is None or blocks is None:
        return
    message = body.get("message") or {}
    try:
        await client.chat_update(
            channel=where[0],
            ts=where[1],
            text=message.get("text") or "Refund decision",
            blocks=blocks,
        )
    except SlackApiError as err:
        log.warning("could not update the clicked message: %s", err.response.get("error"))

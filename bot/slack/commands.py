"""The /refund-… slash commands and the message shortcuts: Slack's front to bot.commands.

    /refund-… commands, message shortcuts -> Commands -> ephemeral answer

A slash command names its conversation in its text (a thread link, an order number or a Workflow
ID: `resolve_conversation`, run by bot.commands once the caller's role allows the command); a
message shortcut is run on a message, whose thread is the conversation. Every listener acks
first, reads the request as the edge typed it (bot.slack.requests), and the answer is seen only by
whoever asked.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.context.respond.async_respond import AsyncRespond
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import tracing
from agent.codec import CodecError
from agent.models import Actor
from bot.commands import ChannelRef, ChatCommands, CommandReply, Conversation, DemoStage, DemoStages
from bot.slack.links import (
    FindByOrder,
    conversation_prefix,
    parse_mention,
    parse_order_number,
    parse_thread_link,
    thread_workflow_id,
)
from bot.slack.render import escape, unescape
from bot.slack.replies import post_ephemeral
from bot.slack.requests import MalformedRequest, MessageShortcut, SlashCommand, typed

log = logging.getLogger(__name__)

# Slash commands and their Slack names (manifests/slack-app*.yaml register the same set).
CRASH_WORKER = "/crash-worker"
REFUND_STATUS = "/refund-status"
REFUND_RELEASE = "/refund-release"
REFUND_HOLD = "/refund-hold"
REFUND_GRANT = "/refund-grant"
REFUND_REVOKE = "/refund-revoke"
REFUND_DEMO = "/refund-demo"
# The support team's: the escalations waiting, and a conversation taken over and handed back.
REFUND_QUEUE = "/refund-queue"
REFUND_TAKEOVER = "/refund-takeover"
REFUND_HANDBACK = "/refund-handback"
# Message shortcuts' callback ids.
STATUS_SHORTCUT = "refund_status"
RELEASE_SHORTCUT = "refund_release"
TAKEOVER_SHORTCUT = "refund_takeover"
HANDBACK_SHORTCUT = "refund_handback"
# Everything registered here: each listener acks with an empty 200 before its work.
COMMANDS = frozenset(
    {
        CRASH_WORKER,
        REFUND_STATUS,
        REFUND_RELEASE,
        REFUND_HOLD,
        REFUND_GRANT,
        REFUND_REVOKE,
        REFUND_DEMO,
        REFUND_QUEUE,
        REFUND_TAKEOVER,
        REFUND_HANDBACK,
    }
)
SHORTCUTS = frozenset({STATUS_SHORTCUT, RELEASE_SHORTCUT, TAKEOVER_SHORTCUT, HANDBACK_SHORTCUT})

_FAILED = "That command failed on our side; the bot's log has the details."
_WHICH_CONVERSATION = (
    "Which conversation? Give the thread's link (⋯ on any message > Copy link) or the order "
    "number, e.g. `{command} 4500`. The message shortcuts do the same from inside the thread."
)


@dataclass(frozen=True)
class Where:
    """Where a slash command was run, and the client to answer there with."""

    team_id: str
    channel_id: str
    client: AsyncWebClient


# A slash command's work: (who ran it, its text, where) -> the answer.
CommandWork = Callable[[Actor, str, Where], Awaitable[CommandReply]]
# A message shortcut's work: (who ran it, the Workflow ID of the message's thread) -> the answer.
ShortcutWork = Callable[[Actor, str], Awaitable[CommandReply]]


def register_commands(
    app: AsyncApp, commands: ChatCommands, find_by_order: FindByOrder | None
) -> None:
    """Answer every slash command and message shortcut through `commands`.

    `find_by_order(team_id, order_number)` lets /refund-status and /refund-release take an order
    number; without it they take a thread link or a Workflow ID only.
    """

    def named(text: str, where: Where, command: str) -> Conversation:
        # Found only once Commands has checked the caller's role.
        return functools.partial(resolve_conversation, text, where.team_id, command, find_by_order)

    async def status(actor: Actor, text: str, where: Where) -> CommandReply:
        return await commands.refund_status(actor, named(text, where, REFUND_STATUS))

    async def release(actor: Actor, text: str, where: Where) -> CommandReply:
        return await commands.refund_release(actor, named(text, where, REFUND_RELEASE))

    async def crash(actor: Actor, text: str, where: Where) -> CommandReply:
        words = text.split()
        if len(words) > 1:
            return CommandReply(ok=False, text=f"Usage: {CRASH_WORKER} [host]")
        return await commands.crash_worker(actor, words[0] if words else None)

    async def hold(actor: Actor, text: str, where: Where) -> CommandReply:
        choice = text.strip().lower()
        if choice not in ("", "on", "off"):
            return CommandReply(ok=False, text=f"Usage: {REFUND_HOLD} [on|off]")
        return await commands.refund_hold(actor, None if not choice else choice == "on")

    async def grant(actor: Actor, text: str, where: Where) -> CommandReply:
        parsed = parse_grant_args(text)
        if parsed is None:
            return CommandReply(
                ok=False,
                text=f"Usage: {REFUND_GRANT} @user refund_approver|presenter|admin [limit]",
            )
        target, role, limit = parsed
        return await commands.refund_grant(actor, target, role, limit)

    async def revoke(actor: Actor, text: str, where: Where) -> CommandReply:
        parsed = parse_grant_args(text)
        if parsed is None or parsed[2] is not None:
            return CommandReply(ok=False, text=f"Usage: {REFUND_REVOKE} @user role")
        target, role, _ = parsed
        return await commands.refund_revoke(actor, target, role)

    async def demo(actor: Actor, text: str, where: Where) -> CommandReply:
        channel = ChannelRef(platform="slack", workspace=where.team_id, channel=where.channel_id)

        def stage(stages: DemoStages) -> DemoStage:
            # The request's client: its credentials, and the app's kept-alive connections.
            return stages.slack(where.client)

        return await commands.refund_demo(actor, text, stage, channel)

    for name, work in (
        (REFUND_DEMO, demo),
        (CRASH_WORKER, crash),
        (REFUND_STATUS, status),
        (REFUND_RELEASE, release),
        (REFUND_HOLD, hold),
        (REFUND_GRANT, grant),
        (REFUND_REVOKE, revoke),
    ):
        app.command(name)(_command_listener(name, work))

    # Message shortcuts: the conversation is the thread of the message they were run on.
    async def shortcut_status(actor: Actor, workflow_id: str) -> CommandReply:
        return await commands.refund_status(actor, workflow_id)

    async def shortcut_release(actor: Actor, workflow_id: str) -> CommandReply:
        return await commands.refund_release(actor, workflow_id)

    app.message_shortcut(STATUS_SHORTCUT)(_shortcut_listener(STATUS_SHORTCUT, shortcut_status))
    app.message_shortcut(RELEASE_SHORTCUT)(_shortcut_listener(RELEASE_SHORTCUT, shortcut_release))

    register_support_commands(app, commands, find_by_order)


def register_support_commands(
    app: AsyncApp, commands: ChatCommands, find_by_order: FindByOrder | None
) -> None:
    """The support team's commands: /refund-queue, and /refund-takeover and /refund-handback
    (a thread link, an order number or a Workflow ID, as /refund-status takes them; or, in the
    thread, the message shortcuts **Take over** and **Hand back**)."""

    async def queue(actor: Actor, text: str, where: Where) -> CommandReply:
        if text.strip():
            return CommandReply(ok=False, text=f"Usage: {REFUND_QUEUE}")
        return await commands.refund_queue(actor)

    def taking(command: str, taken: bool) -> CommandWork:
        async def work(actor: Actor, text: str, where: Where) -> CommandReply:
            # Found only once Commands has checked the caller's role.
            named = functools.partial(
                resolve_conversation, text, where.team_id, command, find_by_order
            )
            return await commands.refund_takeover(actor, named, taken)

        return work

    def taking_here(taken: bool) -> ShortcutWork:
        async def work(actor: Actor, workflow_id: str) -> CommandReply:
            return await commands.refund_takeover(actor, workflow_id, taken)

        return work

    for name, work in (
        (REFUND_QUEUE, queue),
        (REFUND_TAKEOVER, taking(REFUND_TAKEOVER, True)),
        (REFUND_HANDBACK, taking(REFUND_HANDBACK, False)),
    ):
        app.command(name)(_command_listener(name, work))
    for callback_id, taken in ((TAKEOVER_SHORTCUT, True), (HANDBACK_SHORTCUT, False)):
        app.message_shortcut(callback_id)(_shortcut_listener(callback_id, taking_here(taken)))


def parse_grant_args(text: str) -> tuple[Actor, str, str | None] | None:
    """`<@U123|sam> refund_approver 500` -> (Actor, role text, limit text or None)."""
    words = text.split()
    if len(words) not in (2, 3):
        return None
    target = parse_mention(words[0])
    if target is None:
        return None
    return target, words[1], words[2] if len(words) == 3 else None


async def resolve_conversation(
    text: str, team_id: str, command: str, find_by_order: FindByOrder | None
) -> str | CommandReply:
    """A command's argument -> the Workflow ID it names, or the reply explaining why not."""
    text = text.strip()
    if not text:
        return CommandReply(ok=False, text=_WHICH_CONVERSATION.format(command=command))
    thread = parse_thread_link(text, team_id)
    if thread is not None:
        return thread_workflow_id(team_id, thread.channel, thread.thread)
    if text.startswith(conversation_prefix(team_id)) and " " not in text:
        return text  # a Workflow ID, as /refund-status prints it
    order = parse_order_number(text)
    if order is None:
        return CommandReply(ok=False, text=_WHICH_CONVERSATION.format(command=command))
    if find_by_order is None:
        return CommandReply(
            ok=False, text="Finding a conversation by order number is off here; use the link."
        )
    try:
        workflow_id = await find_by_order(team_id, order)
    except CodecError as err:  # the search reads histories: say which key it lacks
        return CommandReply(ok=False, text=f"Can't search conversations by order: {err}.")
    if workflow_id is None:
        return CommandReply(
            ok=False,
            text=f"No open conversation about order {order} (the agent may not have looked it "
            "up yet). Use the thread's link instead.",
        )
    return workflow_id


def _command_listener(name: str, work: CommandWork) -> Callable[..., Awaitable[None]]:
    async def listener(
        ack: AsyncAck,
        body: dict[str, Any],
        context: AsyncBoltContext,
        respond: AsyncRespond | None,
        client: AsyncWebClient,
    ) -> None:
        await ack()  # first: the work below may take seconds (a Worker restart, a history read)
        try:
            command = typed(SlashCommand, context, body)
        except MalformedRequest as err:
            # Only a request that skipped the edge: nothing in it can be trusted to answer to.
            log.warning("slack command %s could not be read (%s); not answered", name, err)
            return
        actor = Actor(
            platform="slack", user_id=command.user_id, display_name=command.user_name or ""
        )
        # Slack sends the text with `&`, `<` and `>` escaped (a link's `&thread_ts=` arrives as
        # `&amp;thread_ts=`); its own markup (`<@U…|name>`, `<https://…>`) is not.
        text = unescape(command.text)
        where = Where(command.team_id or "", command.channel_id or "", client)
        with tracing.span("slack.command", "server", platform="slack", command=name) as span:
            reply = await _reply_or_failure(f"command {name}", work(actor, text, where))
            span.set(outcome="ok" if reply.ok else "refused")
            # Escaped: replies can quote customer text (answers), which must not ping anyone.
            await _respond(respond, name, escape(reply.shown()))

    listener.__name__ = f"command_{name.strip('/').replace('-', '_')}"
    return listener


async def _respond(respond: AsyncRespond | None, name: str, text: str) -> None:
    """The answer, by the command's response_url: a failure to deliver it is one line."""
    if respond is None:
        log.warning("slack command %s has no response_url; its answer went nowhere", name)
        return
    try:
        await respond(text=text, response_type="ephemeral")
    except (SlackApiError, aiohttp.ClientError, TimeoutError, ValueError) as err:
        log.warning("could not answer slack command %s: %s: %s", name, type(err).__name__, err)


def _shortcut_listener(name: str, work: ShortcutWork) -> Callable[..., Awaitable[None]]:
    async def listener(
        ack: AsyncAck,
        body: dict[str, Any],
        context: AsyncBoltContext,
        client: AsyncWebClient,
        respond: AsyncRespond | None,
    ) -> None:
        await ack()
        try:
            shortcut = typed(MessageShortcut, context, body)
        except MalformedRequest as err:
            log.warning("slack shortcut %s could not be read (%s); not answered", name, err)
            return
        user = shortcut.user
        channel = (shortcut.channel.id if shortcut.channel else None) or ""
        message = shortcut.message
        root = ((message.thread_ts or message.ts) if message else None) or ""
        team_id = (shortcut.team.id if shortcut.team else None) or user.team_id or ""
        actor = Actor(
            platform="slack", user_id=user.id, display_name=user.username or user.name or ""
        )
        workflow_id = thread_workflow_id(team_id, channel, root)
        with tracing.span(
            "slack.command", "server", platform="slack", command=name, workflow_id=workflow_id
        ) as span:
            reply = await _reply_or_failure(f"shortcut {name}", work(actor, workflow_id))
            span.set(outcome="ok" if reply.ok else "refused")
            await post_ephemeral(
                client, respond, channel, actor.user_id, root, escape(reply.shown())
            )

    listener.__name__ = f"shortcut_{name}"
    return listener


async def _reply_or_failure(what: str, work: Awaitable[CommandReply]) -> CommandReply:
    # The exception's text stays in the log: it may name internals the asker should not see.
    try:
        return await work
    except Exception:
        log.exception("slack %s failed", what)
        return CommandReply(ok=False, text=_FAILED)

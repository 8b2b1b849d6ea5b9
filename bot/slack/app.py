"""The Slack inbound half: a slack-bolt AsyncApp for the support channel, its buttons and commands.

Every request is acknowledged before any slow work: Bolt acks Events API requests itself before
the listener runs (process_before_response stays False), and every other listener calls `ack()`
first. The router call, which may wait on Temporal, always happens after the HTTP 200 (or the
Socket Mode envelope ack) has gone back to Slack.

    customer message in the support channel -> ConversationRouter.on_message -> Signal(-with-start)
    Approve / Deny button                    -> ConversationRouter.on_click   -> `approval` Signal
    /refund-… commands, message shortcuts    -> Commands                      -> ephemeral answer
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.respond.async_respond import AsyncRespond
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.activities.authorize import GrantSource
from agent.models import Actor, ThreadRef
from bot.commands import CommandReply, Commands
from bot.conversations import NOTICES, ConversationRouter, InboundClick, InboundMessage, Routed
from bot.slack.links import (
    FindByOrder,
    conversation_prefix,
    parse_mention,
    parse_order_number,
    parse_thread_link,
    thread_workflow_id,
)
from bot.slack.render import APPROVE_ACTION_ID, DECISION_BLOCK_ID, DENY_ACTION_ID, escape
from bot.slack.settings import SlackSettings

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"

# Message subtypes a person writes. Every other subtype (message_changed, message_deleted,
# bot_message, channel_join, …) is an edit, a deletion or a system notice and never reaches the
# agent. thread_broadcast is a thread reply also shown in the channel: still the customer's answer.
HUMAN_SUBTYPES = frozenset({"thread_broadcast", "file_share"})

# Slash commands and their Slack names (manifests/slack-app*.yaml register the same set).
CRASH_WORKER = "/crash-worker"
REFUND_STATUS = "/refund-status"
REFUND_RELEASE = "/refund-release"
REFUND_HOLD = "/refund-hold"
REFUND_GRANT = "/refund-grant"
REFUND_REVOKE = "/refund-revoke"
# Message shortcuts' callback ids.
STATUS_SHORTCUT = "refund_status"
RELEASE_SHORTCUT = "refund_release"

_DECISIONS: dict[str, Literal["approve", "deny"]] = {
    APPROVE_ACTION_ID: "approve",
    DENY_ACTION_ID: "deny",
}
_CLICK_NOTICES: dict[Routed, str] = {
    Routed.QUEUED: "Your decision is recorded; the agent is briefly unavailable and will pick it "
    "up shortly.",
    Routed.CLOSED: "This conversation has already finished; your click changed nothing.",
    Routed.UNKNOWN: "This button belongs to no conversation I know; your click changed nothing.",
}
_FAILED = "That command failed on our side; the bot's log has the details."
_CLICK_FAILED = "Your click could not be handled just now; nothing changed. Please try again."
_WHICH_CONVERSATION = (
    "Which conversation? Give the thread's link (⋯ on any message > Copy link) or the order "
    "number, e.g. `{command} 4500`. The message shortcuts do the same from inside the thread."
)

Work = Callable[[Actor, str, str], Awaitable[CommandReply]]


def build_app(
    settings: SlackSettings,
    router: ConversationRouter,
    commands: Commands,
    *,
    client: AsyncWebClient | None = None,
    find_by_order: FindByOrder | None = None,
    grants: GrantSource | None = None,
) -> AsyncApp:
    """The bolt app with every listener registered; run it with `serve` (or `http_web_app`).

    `find_by_order(team_id, order_number)` lets /refund-status and /refund-release take an order
    number (bot.slack.links.order_finder(temporal_client) is the default implementation); without
    it they take a thread link or a Workflow ID only.

    `grants` is the live grant source the Worker's authorize_refund uses for Slack users (a
    SlackUserGroupGrants, or the GrantStore itself). With it, an Approve / Deny click from someone
    who may not decide is refused privately and leaves the buttons in place; without it every
    click goes to the Workflow, whose authorization check says the result in the thread.
    """
    if settings.bot_token is None and client is None:
        raise ValueError("SLACK_BOT_TOKEN is not set; the Slack app cannot be built")
    if settings.app_token is None and settings.signing_secret is None:
        # Bolt would otherwise verify HTTP requests against an empty secret, which anyone can sign.
        raise ValueError("HTTP mode needs SLACK_SIGNING_SECRET (or set SLACK_APP_TOKEN)")
    if not settings.support_channel:
        raise ValueError("SLACK_SUPPORT_CHANNEL (a channel id) is not set")
    support_channel = settings.support_channel
    thread_locks = KeyedLocks()

    if client is None:
        assert settings.bot_token is not None
        client = AsyncWebClient(
            token=settings.bot_token.get_secret_value(), base_url=settings.api_url
        )
    secret = settings.signing_secret.get_secret_value() if settings.signing_secret else ""
    app = AsyncApp(
        name="refund-bot",
        client=client,
        signing_secret=secret,
        request_verification_enabled=True,
        process_before_response=False,  # listeners run after the ack, never before it
    )

    # -- customer messages -------------------------------------------------------------------

    @app.event("message")
    async def on_message(
        body: dict[str, Any], event: dict[str, Any], client: AsyncWebClient
    ) -> None:
        inbound = inbound_message(body, event, support_channel)
        if inbound is None:
            return
        # Bolt runs each event's listener as its own task; one thread's messages are routed one
        # at a time, in arrival order, so a slow signal cannot be overtaken by the next answer.
        async with thread_locks.hold(inbound.thread.thread):
            routed = await router.on_message(inbound)
        log.info("slack event %s in %s: %s", inbound.event_id, inbound.thread.thread, routed)
        notice = NOTICES.get(routed)
        if notice:
            await _post_quietly(client, inbound.thread.channel, inbound.thread.thread, notice)

    # -- Approve / Deny ----------------------------------------------------------------------

    async def on_decision(
        ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient, respond: AsyncRespond
    ) -> None:
        await ack()  # first: everything below may wait on Slack, the grants or Temporal
        click = inbound_click(body)
        where = _click_location(body)
        if click is None or where is None:
            return

        async def tell(text: str) -> None:
            await _ephemeral(client, respond, where[0], click.actor.user_id, where[2], text)

        if grants is not None:
            # A courtesy pre-check, so a click that cannot count leaves the buttons for someone
            # who may decide. The Workflow's authorize_refund reads the grants again and decides.
            allowed = await _may_decide(grants, click.actor)
            if not allowed:
                await tell(_refusal(click.actor) if allowed is False else _CLICK_FAILED)
                return
        # The buttons go, so nobody presses them twice.
        await _update_clicked(client, body, decided_blocks(body, click, "checking authorization"))
        try:
            routed = await router.on_click(click)
        except Exception:
            log.exception("could not route the %s click on %s", click.decision, click.workflow_id)
            await _update_clicked(client, body, (body.get("message") or {}).get("blocks"))
            await tell(_CLICK_FAILED)
            return
        log.info("slack click %s on %s: %s", click.click_id, click.workflow_id, routed)
        notice = _CLICK_NOTICES.get(routed)
        if notice is not None:
            if routed in (Routed.CLOSED, Routed.UNKNOWN):
                await _update_clicked(client, body, decided_blocks(body, click, notice))
            await tell(notice)

    app.action(APPROVE_ACTION_ID)(on_decision)
    app.action(DENY_ACTION_ID)(on_decision)

    # -- slash commands ----------------------------------------------------------------------

    async def conversation_of(text: str, team_id: str, command: str) -> str | CommandReply:
        return await resolve_conversation(text, team_id, command, find_by_order)

    async def status(actor: Actor, text: str, team_id: str) -> CommandReply:
        target = await conversation_of(text, team_id, REFUND_STATUS)
        if isinstance(target, CommandReply):
            return target
        return await commands.refund_status(actor, target)

    async def release(actor: Actor, text: str, team_id: str) -> CommandReply:
        target = await conversation_of(text, team_id, REFUND_RELEASE)
        if isinstance(target, CommandReply):
            return target
        return await commands.refund_release(actor, target)

    async def crash(actor: Actor, text: str, team_id: str) -> CommandReply:
        return await commands.crash_worker(actor)

    async def hold(actor: Actor, text: str, team_id: str) -> CommandReply:
        choice = text.strip().lower()
        if choice not in ("", "on", "off"):
            return CommandReply(ok=False, text=f"Usage: {REFUND_HOLD} [on|off]")
        return await commands.refund_hold(actor, None if not choice else choice == "on")

    async def grant(actor: Actor, text: str, team_id: str) -> CommandReply:
        parsed = parse_grant_args(text)
        if parsed is None:
            return CommandReply(
                ok=False,
                text=f"Usage: {REFUND_GRANT} @user refund_approver|presenter|admin [limit]",
            )
        target, role, limit = parsed
        return await commands.refund_grant(actor, target, role, limit)

    async def revoke(actor: Actor, text: str, team_id: str) -> CommandReply:
        parsed = parse_grant_args(text)
        if parsed is None or parsed[2] is not None:
            return CommandReply(ok=False, text=f"Usage: {REFUND_REVOKE} @user role")
        target, role, _ = parsed
        return await commands.refund_revoke(actor, target, role)

    for name, work in (
        (CRASH_WORKER, crash),
        (REFUND_STATUS, status),
        (REFUND_RELEASE, release),
        (REFUND_HOLD, hold),
        (REFUND_GRANT, grant),
        (REFUND_REVOKE, revoke),
    ):
        app.command(name)(_command_listener(name, work))

    # -- message shortcuts: the thread is the message's --------------------------------------

    async def shortcut_status(actor: Actor, workflow_id: str) -> CommandReply:
        return await commands.refund_status(actor, workflow_id)

    async def shortcut_release(actor: Actor, workflow_id: str) -> CommandReply:
        return await commands.refund_release(actor, workflow_id)

    app.message_shortcut(STATUS_SHORTCUT)(_shortcut_listener(STATUS_SHORTCUT, shortcut_status))
    app.message_shortcut(RELEASE_SHORTCUT)(_shortcut_listener(RELEASE_SHORTCUT, shortcut_release))
    return app


class KeyedLocks:
    """One asyncio.Lock per key while anyone holds or waits for it; forgotten when free."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


# ---------------------------------------------------------------------------------------------
# Slack payloads -> the router's values (pure)
# ---------------------------------------------------------------------------------------------


def inbound_message(
    body: dict[str, Any], event: dict[str, Any], support_channel: str
) -> InboundMessage | None:
    """A message event the agent should see, or None (other channels, bots, edits, notices)."""
    if event.get("type") != "message" or event.get("channel") != support_channel:
        return None
    subtype = event.get("subtype")
    if subtype is not None and subtype not in HUMAN_SUBTYPES:
        return None
    user, ts = event.get("user"), event.get("ts")
    if event.get("bot_id") or event.get("bot_profile") or not user or not ts:
        return None
    team_id = body.get("team_id") or event.get("team") or ""
    thread_ts = event.get("thread_ts")
    opens = thread_ts is None or thread_ts == ts
    return InboundMessage(
        event_id=str(body.get("event_id") or f"{support_channel}-{ts}"),
        thread=ThreadRef(
            platform="slack",
            workspace=team_id,
            channel=support_channel,
            thread=ts if opens else thread_ts,
        ),
        message_id=ts,
        author=Actor(platform="slack", user_id=user, display_name=_display_name(event)),
        text=event.get("text") or "",
        opens_thread=opens,
    )


def _display_name(event: dict[str, Any]) -> str:
    # Message events from people usually carry `user_profile`; no users.info call (or the
    # users:read scope) just for a name. The id stands in when it is absent.
    profile = event.get("user_profile") or {}
    return profile.get("display_name") or profile.get("real_name") or event.get("user") or ""


def inbound_click(body: dict[str, Any]) -> InboundClick | None:
    """An Approve / Deny block_actions payload -> InboundClick, or None if it is not ours."""
    actions = [a for a in body.get("actions") or [] if a.get("action_id") in _DECISIONS]
    user = body.get("user") or {}
    if len(actions) != 1 or not user.get("id"):
        return None
    action = actions[0]
    workflow_id = str(action.get("value") or "")
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
    )


def _click_location(body: dict[str, Any]) -> tuple[str, str, str | None] | None:
    """(channel, message ts, thread root ts) of the message whose button was clicked."""
    container = body.get("container") or {}
    message = body.get("message") or {}
    channel = container.get("channel_id") or (body.get("channel") or {}).get("id")
    ts = container.get("message_ts") or message.get("ts")
    if not channel or not ts:
        return None
    return channel, ts, container.get("thread_ts") or message.get("thread_ts")


def decided_blocks(body: dict[str, Any], click: InboundClick, status: str) -> list[dict[str, Any]]:
    """The clicked message's blocks with the buttons replaced by who decided what."""
    kept = [
        b
        for b in (body.get("message") or {}).get("blocks") or []
        if b.get("type") != "actions" and b.get("block_id") != DECISION_BLOCK_ID
    ]
    verb = "Approved" if click.decision == "approve" else "Denied"
    separator = ", " if status == "checking authorization" else ": "
    line = f"{verb} by <@{click.actor.user_id}>{separator}{escape(status)}"
    return [
        *kept,
        {
            "type": "context",
            "block_id": DECISION_BLOCK_ID,
            "elements": [{"type": "mrkdwn", "text": line}],
        },
    ]


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
    workflow_id = await find_by_order(team_id, order)
    if workflow_id is None:
        return CommandReply(
            ok=False,
            text=f"No open conversation about order {order} (the agent may not have looked it "
            "up yet). Use the thread's link instead.",
        )
    return workflow_id


# ---------------------------------------------------------------------------------------------
# Listeners' shared halves
# ---------------------------------------------------------------------------------------------


def _command_listener(name: str, work: Work) -> Callable[..., Awaitable[None]]:
    async def listener(ack: AsyncAck, command: dict[str, Any], respond: AsyncRespond) -> None:
        await ack()  # first: the work below may take seconds (a Worker restart, a history read)
        actor = Actor(
            platform="slack",
            user_id=command["user_id"],
            display_name=command.get("user_name") or "",
        )
        try:
            reply = await work(actor, command.get("text") or "", command.get("team_id") or "")
        except Exception:
            log.exception("slack command %s failed", name)
            reply = CommandReply(ok=False, text=_FAILED)
        # Escaped: replies can quote customer text (answers), which must not ping anyone.
        await respond(text=escape(reply.text), response_type="ephemeral")

    listener.__name__ = f"command_{name.strip('/').replace('-', '_')}"
    return listener


def _shortcut_listener(
    name: str, work: Callable[[Actor, str], Awaitable[CommandReply]]
) -> Callable[..., Awaitable[None]]:
    async def listener(
        ack: AsyncAck, shortcut: dict[str, Any], client: AsyncWebClient, respond: AsyncRespond
    ) -> None:
        await ack()
        user = shortcut.get("user") or {}
        channel = (shortcut.get("channel") or {}).get("id") or ""
        message = shortcut.get("message") or {}
        root = message.get("thread_ts") or message.get("ts") or ""
        team_id = (shortcut.get("team") or {}).get("id") or user.get("team_id") or ""
        actor = Actor(
            platform="slack",
            user_id=user.get("id") or "",
            display_name=user.get("username") or user.get("name") or "",
        )
        try:
            reply = await work(actor, thread_workflow_id(team_id, channel, root))
        except Exception:
            log.exception("slack shortcut %s failed", name)
            reply = CommandReply(ok=False, text=_FAILED)
        await _ephemeral(client, respond, channel, actor.user_id, root, escape(reply.text))

    listener.__name__ = f"shortcut_{name}"
    return listener


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


async def _post_quietly(client: AsyncWebClient, channel: str, thread_ts: str, text: str) -> None:
    try:
        await client.chat_postMessage(
            channel=channel, thread_ts=thread_ts, text=text, unfurl_links=False
        )
    except SlackApiError as err:
        log.warning("could not post a notice in %s: %s", channel, err.response.get("error"))


async def _ephemeral(
    client: AsyncWebClient,
    respond: AsyncRespond | None,
    channel: str,
    user_id: str,
    thread_ts: str | None,
    text: str,
) -> None:
    """Only `user_id` sees it, in the thread; by response_url if the bot is not in the channel."""
    try:
        await client.chat_postEphemeral(
            channel=channel, user=user_id, thread_ts=thread_ts, text=text
        )
        return
    except SlackApiError as err:
        log.info("chat.postEphemeral in %s failed (%s)", channel, err.response.get("error"))
    if respond is not None and respond.response_url:
        await respond(text=text, response_type="ephemeral", replace_original=False)


# ---------------------------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------------------------


def http_web_app(app: AsyncApp) -> web.Application:
    """An aiohttp application serving POST /slack/events (Events API, interactivity, commands)."""

    async def events(request: web.Request) -> web.Response:
        return await to_aiohttp_response(await app.async_dispatch(await to_bolt_request(request)))

    web_app = web.Application()
    web_app.router.add_post(EVENTS_PATH, events)
    return web_app


async def serve(app: AsyncApp, settings: SlackSettings) -> None:
    """Serve Slack until cancelled: Socket Mode with SLACK_APP_TOKEN, else HTTP on SLACK_PORT."""
    if settings.app_token is not None:
        handler = AsyncSocketModeHandler(app, settings.app_token.get_secret_value())
        try:
            await handler.connect_async()
            log.info("slack: Socket Mode connected")
            await asyncio.Event().wait()
        finally:
            await handler.close_async()
        return

    runner = web.AppRunner(http_web_app(app), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "0.0.0.0", settings.port).start()
        log.info("slack: HTTP mode on :%d%s", settings.port, EVENTS_PATH)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()

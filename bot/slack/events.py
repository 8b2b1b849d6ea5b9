"""Customer messages: which Slack message events reach the agent, and routing them in order.

    customer message in the support channel -> router.on_message -> Signal(-with-start)

`inbound_message` is the filter (pure: other channels, bots, edits and system notices are
dropped, and the bot's own posts by the identity auth.test gives it, bot.slack.identity);
`register_message_events` adds the listener that routes what passes, one thread at a
time, and posts the router's notice (if any) in the thread. The listener reads the event as the
edge typed it (bot.slack.requests), so nothing in it can fail on a field's type; an event that
reached it without passing the edge and does not read is kept in the inbox as a dead letter,
since Slack has had its ack and will not send it again.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from agent import tracing
from agent.models import Actor, ThreadRef
from bot.conversations import NOT_KEPT, NOTICES, InboundMessage, Router, keep_unreadable
from bot.keyed_locks import KeyedLocks
from bot.slack.identity import BotIdentity, OwnIdentity
from bot.slack.replies import post_notice
from bot.slack.requests import MalformedRequest, MessageEvent, MessageEventCallback, typed

log = logging.getLogger(__name__)

# Message subtypes a person writes. Every other subtype (message_changed, message_deleted,
# bot_message, channel_join, …) is an edit, a deletion or a system notice and never reaches the
# agent. thread_broadcast is a thread reply also shown in the channel: still the customer's answer.
HUMAN_SUBTYPES = frozenset({"thread_broadcast", "file_share"})


def register_message_events(
    app: AsyncApp, router: Router, support_channel: str, identity: OwnIdentity
) -> None:
    """Route the support channel's customer messages to `router`, each thread in arrival order;
    the bot's own (`identity`) never."""
    thread_locks = KeyedLocks()

    @app.event("message")
    async def on_message(
        body: dict[str, Any], context: AsyncBoltContext, client: AsyncWebClient
    ) -> None:
        try:
            request = typed(MessageEventCallback, context, body)
        except (MalformedRequest, ValidationError) as err:
            await keep_unreadable(router, "slack", "message", body, str(err).splitlines()[0])
            return
        try:
            me = await identity.get()  # known already: the edge needed it to keep the message
        except Exception as err:
            log.warning("slack: event %s not routed: who the bot is is unknown (%s)",
                        request.event_id, err)  # fmt: skip
            return
        inbound = inbound_message(request, support_channel, me)
        if inbound is None:
            return
        with tracing.span("slack.message", "server", platform="slack", event_id=inbound.event_id):
            # Bolt runs each event's listener as its own task; one thread's messages are routed
            # one at a time, in arrival order, so a slow signal cannot be overtaken by the next.
            try:
                async with thread_locks.hold(inbound.thread.thread):
                    routed = await router.on_message(inbound)
            except Exception:
                # The router keeps whatever it cannot deliver; this is it failing to keep it.
                log.exception("could not route Slack event %s", inbound.event_id)
                await post_notice(client, inbound.thread.channel, inbound.thread.thread, NOT_KEPT)
                return
            log.info("slack event %s in %s: %s", inbound.event_id, inbound.thread.thread, routed)
            notice = NOTICES.get(routed)
            if notice:
                await post_notice(client, inbound.thread.channel, inbound.thread.thread, notice)


def inbound_message(
    request: MessageEventCallback, support_channel: str, me: BotIdentity
) -> InboundMessage | None:
    """A message event the agent should see, or None (other channels, bots, edits, notices,
    and the bot's own posts, `me`, whatever their shape)."""
    event = request.event
    if event.channel != support_channel or me.wrote(event):
        return None
    if event.subtype is not None and event.subtype not in HUMAN_SUBTYPES:
        return None
    user, ts = event.user, event.ts
    if event.bot_id or event.bot_profile or not user or not ts:
        return None
    team_id = request.team_id or event.team or ""
    root = event.thread_ts or ts
    opens = root == ts
    return InboundMessage(
        event_id=request.event_id or f"{support_channel}-{ts}",
        thread=ThreadRef(platform="slack", workspace=team_id, channel=support_channel, thread=root),
        message_id=ts,
        author=Actor(platform="slack", user_id=user, display_name=_display_name(event)),
        text=event.text or "",
        opens_thread=opens,
    )


def _display_name(event: MessageEvent) -> str:
    # Message events from people usually carry `user_profile`; no users.info call (or the
    # users:read scope) just for a name. The id stands in when it is absent.
    profile = event.user_profile
    if profile is not None and (profile.display_name or profile.real_name):
        return profile.display_name or profile.real_name or ""
    return event.user or ""

"""Customer messages: from the support channel and its threads to the conversation router.

    customer message in the support channel -> kept, waiting for its thread -> openings (thread,
                                               then router.release: start)
    message in one of those threads         -> router.on_message -> `customer_message` Signal
    message in a thread the cache does not know, whose parent cannot be looked up now
                                            -> router.on_message all the same: the Workflow ID
                                               needs no parent, and no such conversation is UNKNOWN

Messages from bots (this one included), system messages, edits and deletions never reach the
router: only MESSAGE_CREATE of a person's message is handled (discord.py dispatches edits and
deletions as other events, which the client does not listen to).
"""

from __future__ import annotations

import asyncio
import logging

import discord

from agent.models import ThreadRef
from bot.conversations import NOT_KEPT, NOTICES, InboundMessage, Routed, Waiting, cut
from bot.discord.actors import actor_for
from bot.discord.openings import UNAVAILABLE, WAITS_FOR, ThreadOpenings, now_iso
from bot.discord.parts import BotParts
from bot.discord.replies import say
from bot.reconnect import one_line

log = logging.getLogger(__name__)

# A message's channel when it may be a thread: cached (Thread) or not (PartialMessageable).
MaybeThread = discord.Thread | discord.PartialMessageable
# How long a lookup of an uncached thread's parent may take before the message is routed anyway.
LOOKUP_SECONDS = 10.0
HUMAN_MESSAGE_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})


def is_from_a_person(message: discord.Message, me: discord.ClientUser | None) -> bool:
    """A person's own words in a guild: no bot (`me` included), webhook or system message."""
    if message.guild is None or message.webhook_id is not None:
        return False
    if message.author.bot or (me is not None and message.author.id == me.id):
        return False
    # Joins, pins, thread-created notices and other system messages are not anyone's words.
    return message.type in HUMAN_MESSAGE_TYPES


async def route_customer_message(
    parts: BotParts, client: discord.Client, openings: ThreadOpenings, message: discord.Message
) -> None:
    """Hand a message in the support channel or one of its threads to the router.

    An opening message is kept before anything else, then `openings` opens its thread and
    delivers it; messages anywhere else are left alone. The router's notice for the result (if
    any) goes into the thread.
    """
    assert message.guild is not None
    support_channel_id = parts.support_channel_id
    if parts.router.seen(str(message.id)):
        # Redelivered (a RESUME may replay what this client already handled): dropped before any
        # request to Discord, so no second thread is attempted on an opening message.
        log.info("Discord message %s was already routed; the redelivery is dropped", message.id)
        return
    if message.channel.id == support_channel_id:
        await _keep_opening(parts, openings, message)
        return
    if not isinstance(message.channel, MaybeThread):
        return
    ours = await _in_support_channel(client, message.channel, support_channel_id)
    if ours is False:
        return  # a thread elsewhere
    thread = message.channel
    inbound = _inbound(message, support_channel_id, thread_id=thread.id, opens_thread=False)
    try:
        routed = await parts.router.on_message(inbound)
    except Exception as err:
        log.warning("could not keep Discord message %s: %s", message.id, one_line(err))
        if ours:
            await say(thread, NOT_KEPT)
        return
    notice = NOTICES.get(routed)
    # A thread not known to be the support channel's hears only what proves it is a conversation.
    if notice is not None and (ours or routed == Routed.CLOSED):
        await say(thread, notice)


def _inbound(
    message: discord.Message, support_channel_id: int, *, thread_id: int, opens_thread: bool
) -> InboundMessage:
    assert message.guild is not None
    return InboundMessage(
        event_id=str(message.id),
        thread=ThreadRef(
            platform="discord",
            workspace=str(message.guild.id),
            channel=str(support_channel_id),
            thread=str(thread_id),
        ),
        message_id=str(message.id),
        author=actor_for(message.author),
        # Cut at the edge too: Nitro members may send 4000 characters; nothing longer than
        # the router would keep is held here, logged or queued.
        text=cut(message.content),
        opens_thread=opens_thread,
    )


async def _keep_opening(
    parts: BotParts, openings: ThreadOpenings, message: discord.Message
) -> None:
    """Keep the opening first, under the id its thread will have, then have its thread opened."""
    # A thread opened on a message takes the message's id: the conversation's key is known now.
    inbound = _inbound(message, parts.support_channel_id, thread_id=message.id, opens_thread=True)
    try:
        kept = await parts.router.keep_waiting(inbound, WAITS_FOR)
    except Exception as err:
        log.warning("could not keep Discord message %s: %s", message.id, one_line(err))
        await openings.reply(message.channel.id, message.id, NOT_KEPT, nonce=f"nk{message.id}")
        return
    if isinstance(kept, Routed):
        return  # a duplicate: its first copy is being opened
    openings.open(Waiting(kept, inbound.thread, inbound.author, now_iso(), 0, None))


async def _in_support_channel(
    client: discord.Client, channel: MaybeThread, support_channel_id: int
) -> bool | None:
    """Whether the thread is the support channel's; None when that cannot be known now."""
    if isinstance(channel, discord.Thread):
        return channel.parent_id == support_channel_id
    # A channel the cache does not know (rare: GUILD_CREATE lists active threads and
    # THREAD_CREATE adds new ones). Ask Discord what it is.
    try:
        async with asyncio.timeout(LOOKUP_SECONDS):
            fetched = await client.fetch_channel(channel.id)
    except UNAVAILABLE as err:
        log.warning(
            "could not look up channel %s (%s); its message is routed by the thread's id",
            channel.id,
            one_line(err),
        )
        return None
    return isinstance(fetched, discord.Thread) and fetched.parent_id == support_channel_id

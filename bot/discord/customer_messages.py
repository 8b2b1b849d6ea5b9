"""Customer messages: from the support channel and its threads to the conversation router.

    customer message in the support channel -> public thread on it -> router.on_message (start)
    message in one of those threads         -> router.on_message -> `customer_message` Signal

Messages from bots (this one included), system messages, edits and deletions never reach the
router: only MESSAGE_CREATE of a person's message is handled (discord.py dispatches edits and
deletions as other events, which the client does not listen to).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import discord

from agent.models import ThreadRef
from bot.conversations import NOT_KEPT, NOTICES, InboundMessage, cut
from bot.discord.actors import actor_for
from bot.discord.parts import BotParts
from bot.discord.render import fit_content
from bot.discord.replies import say

if TYPE_CHECKING:  # discord.types is for type checkers: imported first, it is a circular import
    from discord.types.threads import ThreadArchiveDuration

log = logging.getLogger(__name__)

# A message's channel when it may be a thread: cached (Thread) or not (PartialMessageable).
MaybeThread = discord.Thread | discord.PartialMessageable

# A week: an escalation can wait days for a person. A post into an archived thread reopens it.
THREAD_ARCHIVE_MINUTES: ThreadArchiveDuration = 10080
THREAD_ALREADY_EXISTS = 160004  # Discord's error code: this message already has a thread
UNKNOWN_MESSAGE = 10008  # Discord's error code: no such message (deleted as soon as posted)
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
    parts: BotParts, client: discord.Client, message: discord.Message
) -> None:
    """Hand a message in the support channel or one of its threads to the router.

    An opening message gets its thread first; messages anywhere else are left alone. The router's
    notice for the result (if any) goes into the thread.
    """
    assert message.guild is not None
    support_channel_id = parts.support_channel_id
    if parts.router.seen(str(message.id)):
        # Redelivered (a RESUME may replay what this client already handled): dropped before any
        # request to Discord, so no second thread is attempted on an opening message.
        log.info("Discord message %s was already routed; the redelivery is dropped", message.id)
        return
    thread: MaybeThread | None
    if message.channel.id == support_channel_id:
        thread = await _open_thread(client, message)
        if thread is None:
            return
        opens_thread = True
    elif isinstance(message.channel, MaybeThread) and (
        await _parent_of(client, message.channel) == support_channel_id
    ):
        thread = message.channel
        opens_thread = False
    else:
        return  # another channel, or a thread elsewhere

    inbound = InboundMessage(
        event_id=str(message.id),
        thread=ThreadRef(
            platform="discord",
            workspace=str(message.guild.id),
            channel=str(support_channel_id),
            thread=str(thread.id),
        ),
        message_id=str(message.id),
        author=actor_for(message.author),
        # Cut at the edge too: Nitro members may send 4000 characters; nothing longer than
        # the router would keep is held here, logged or queued.
        text=cut(message.content),
        opens_thread=opens_thread,
    )
    try:
        routed = await parts.router.on_message(inbound)
    except Exception:
        log.exception("could not route Discord message %s", message.id)
        await say(thread, NOT_KEPT)
        return
    notice = NOTICES.get(routed)
    if notice is not None:
        await say(thread, notice)


async def _open_thread(client: discord.Client, message: discord.Message) -> MaybeThread | None:
    assert message.guild is not None
    name = fit_content(f"Refund request from {message.author.display_name}", 100)
    try:
        return await message.create_thread(name=name, auto_archive_duration=THREAD_ARCHIVE_MINUTES)
    except discord.HTTPException as err:
        if err.code == THREAD_ALREADY_EXISTS:
            # Another replica got there first. A thread on a message has the message's id,
            # and the router's signal-with-start makes the second start a no-op.
            return client.get_partial_messageable(
                message.id, guild_id=message.guild.id, type=discord.ChannelType.public_thread
            )
        if err.code == UNKNOWN_MESSAGE:
            # Deleted before its thread could open: nothing of it is left to answer, or to keep.
            log.warning("message %s was gone before its thread opened", message.id)
            return None
        log.error(
            "could not open a thread on message %s in the support channel (%s %s); the bot "
            "needs Create Public Threads and Send Messages in Threads there",
            message.id,
            err.status,
            err.text,
        )
        return None


async def _parent_of(client: discord.Client, channel: MaybeThread) -> int | None:
    if isinstance(channel, discord.Thread):
        return channel.parent_id
    # A channel the cache does not know (rare: GUILD_CREATE lists active threads and
    # THREAD_CREATE adds new ones). Ask Discord what it is.
    try:
        fetched = await client.fetch_channel(channel.id)
    except discord.HTTPException:
        log.warning("could not look up channel %s", channel.id, exc_info=True)
        return None
    return fetched.parent_id if isinstance(fetched, discord.Thread) else None

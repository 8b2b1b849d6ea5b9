"""The bot's own short answers on Discord: a reply only the caller sees, or a notice in a thread.

These are the inbound side's courtesy messages (the agent's posts go through the Worker's
`post_to_thread` Activity, bot.discord.outbound). The bot never pings anyone: every send carries
AllowedMentions.none() (NO_PINGS), and the client's default is the same.

Discord waits 3 s for the first answer to an interaction. Every handler answers directly when its
work finishes inside RESPONSE_BUDGET, and otherwise defers (acknowledges now, answers later).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import discord

from bot.discord.render import fit_content

log = logging.getLogger(__name__)

# Answer directly when the work is done within this; defer past it. Discord's limit is 3 s and
# the answer itself still has to travel.
RESPONSE_BUDGET = 2.0
NO_PINGS = discord.AllowedMentions.none()

FAILED = "That did not work on our side; the bot's log has the details."


async def finished_within(task: asyncio.Future[Any], seconds: float) -> bool:
    """Wait up to `seconds` for `task`; True when it is done. The task keeps running either way."""
    done, _ = await asyncio.wait({task}, timeout=seconds)
    return bool(done)


async def tell_privately(interaction: discord.Interaction, text: str) -> None:
    """An ephemeral answer: the first response, or a followup once the interaction has one."""
    text = fit_content(text)
    if interaction.response.is_done():
        await interaction.followup.send(text, ephemeral=True, allowed_mentions=NO_PINGS)
    else:
        await interaction.response.send_message(text, ephemeral=True, allowed_mentions=NO_PINGS)


async def say(channel: discord.abc.Messageable, text: str) -> None:
    """Post a notice in a channel or thread; a failure (Discord or the network away) is one line
    in the log, never raised."""
    try:
        await channel.send(text, allowed_mentions=NO_PINGS)
    except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as err:
        log.warning("could not post a notice in channel %s: %s", getattr(channel, "id", "?"), err)

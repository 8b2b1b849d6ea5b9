"""What Discord's handlers use of refund-bot: a few parts, handed to them, not the whole client.

    RefundBotClient -> BotParts -> customer_messages, buttons (through interaction.client),
                                   slash_commands

The handlers reach the gateway itself as a plain discord.Client (its user, its HTTP client, a
channel lookup); the rest of what they need is here, so none of them imports the client module.
"""

from __future__ import annotations

from dataclasses import dataclass

import discord

from bot.clicks import ApprovalCheck
from bot.commands import ChatCommands
from bot.conversations import WaitingRouter
from bot.discord.replies import RESPONSE_BUDGET
from bot.discord.settings import DiscordSettings


@dataclass
class BotParts:
    router: WaitingRouter
    commands: ChatCommands
    settings: DiscordSettings
    support_channel_id: int
    can_approve: ApprovalCheck  # the click's live grant pre-check
    # How long a handler may work before it defers its answer (Discord waits 3 s for the first).
    response_budget: float = RESPONSE_BUDGET


def parts_of(client: discord.Client) -> BotParts:
    """The parts a client carries: what a persistent button, which discord.py builds from its
    custom id alone, finds through `interaction.client`."""
    parts = getattr(client, "parts", None)
    if not isinstance(parts, BotParts):
        raise TypeError(f"{type(client).__name__} carries no BotParts")
    return parts

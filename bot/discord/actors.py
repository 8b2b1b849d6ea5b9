"""Who did something on Discord: a Discord user as the Actor the agent, grants and audit know."""

from __future__ import annotations

import discord

from agent.models import Actor


def actor_for(user: discord.abc.User) -> Actor:
    """The Actor for a Discord user: the id identifies them, the display name is for showing."""
    return Actor(platform="discord", user_id=str(user.id), display_name=user.display_name)

"""Which chat platforms this process serves, built from settings.

The Worker receives the platforms' outbound halves from here (injection keeps worker/ and agent/
free of bot/ imports).
"""

from __future__ import annotations

from agent.activities.authorize import GrantSource
from agent.activities.notify import ThreadPoster
from agent.settings import AgentSettings
from agent.stores.database import database_for
from agent.stores.grants import GrantStore
from bot.discord.grants import DiscordRoleGrants
from bot.discord.outbound import DiscordThreadPoster
from bot.discord.settings import DiscordSettings
from bot.local.thread_store import LocalThreadStore
from bot.slack.grants import SlackUserGroupGrants
from bot.slack.outbound import SlackThreadPoster
from bot.slack.settings import SlackSettings


def local_thread_store(settings: AgentSettings) -> LocalThreadStore:
    return LocalThreadStore(database_for(settings))


def outbound_posters(
    settings: AgentSettings,
    slack: SlackSettings | None = None,
    discord: DiscordSettings | None = None,
) -> dict[str, ThreadPoster]:
    """One poster per platform: the local channel always, Slack and Discord when configured."""
    slack = slack or SlackSettings()
    discord = discord or DiscordSettings()
    posters: dict[str, ThreadPoster] = {"local": local_thread_store(settings)}
    if slack.enabled:
        posters["slack"] = SlackThreadPoster.from_settings(slack)
    if discord.enabled:
        posters["discord"] = DiscordThreadPoster.from_settings(discord)
    return posters


def grant_sources(
    settings: AgentSettings,
    slack: SlackSettings | None = None,
    discord: DiscordSettings | None = None,
) -> dict[str, GrantSource]:
    """Platform-owned live grant sources, when configured; the grants store answers otherwise."""
    slack = slack or SlackSettings()
    discord = discord or DiscordSettings()
    store = GrantStore(database_for(settings))
    sources: dict[str, GrantSource] = {}
    if discord.enabled and discord.approver_role:
        sources["discord"] = DiscordRoleGrants(discord, store)
    if slack.enabled and slack.approver_group:
        sources["slack"] = SlackUserGroupGrants(slack, store)
    return sources

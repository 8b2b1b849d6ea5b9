"""Which chat platforms this process serves, built from settings.

The Worker receives the platforms' outbound halves from here (injection keeps worker/ and agent/
free of bot/ imports), and the commands their way to the Worker supervisors (bot/ free of worker/).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

from temporalio.client import Client

from agent.activities.authorize import GrantSource
from agent.activities.notify import ThreadPoster
from agent.settings import AgentSettings, TemporalSettings
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from bot.commands import SupervisorGone
from bot.discord.settings import DiscordSettings
from bot.local.thread_store import LocalThreadStore
from bot.slack.settings import SlackSettings
from refund_bot.demos import paused_restart
from worker.control import NoSupervisorAnswers, RestartReport, request_worker_restart
from worker.pollers import supervisor_hosts, supervisors

# A platform's SDK (discord.py, slack_sdk) is imported only when that platform is configured: a
# Worker's start-up, the cost of every crash, does not pay for SDKs it will not use.


def local_thread_store(settings: AgentSettings) -> LocalThreadStore:
    return LocalThreadStore(database_for(settings))


def outbound_posters(
    settings: AgentSettings,
    slack: SlackSettings | None = None,
    discord: DiscordSettings | None = None,
    *,
    closing: AsyncExitStack,
) -> dict[str, ThreadPoster]:
    """One poster per platform: the local channel always, Slack and Discord when configured.

    Slack's and Discord's keep their connections open between posts; `closing` closes them.
    """
    slack = slack or SlackSettings()
    discord = discord or DiscordSettings()
    posters: dict[str, ThreadPoster] = {"local": local_thread_store(settings)}
    if slack.enabled:
        from bot.slack.outbound import SlackThreadPoster

        slack_poster = SlackThreadPoster.from_settings(slack)
        closing.push_async_callback(slack_poster.close)
        posters["slack"] = slack_poster
    if discord.enabled:
        from bot.discord.outbound import DiscordThreadPoster

        discord_poster = DiscordThreadPoster.from_settings(discord)
        closing.push_async_callback(discord_poster.close)
        posters["discord"] = discord_poster
    return posters


def grant_sources(
    settings: AgentSettings,
    slack: SlackSettings | None = None,
    discord: DiscordSettings | None = None,
    *,
    closing: AsyncExitStack,
) -> dict[str, GrantSource]:
    """Platform-owned live grant sources, when configured; the grants store answers otherwise.

    Each keeps its connection to the platform open between reads; `closing` closes them.
    """
    slack = slack or SlackSettings()
    discord = discord or DiscordSettings()
    store = GrantStore(database_for(settings))
    sources: dict[str, GrantSource] = {}
    if discord.enabled and discord.approver_role:
        from bot.discord.grants import DiscordRoleGrants

        discord_roles = DiscordRoleGrants(discord, store)
        closing.push_async_callback(discord_roles.close)
        sources["discord"] = discord_roles
    if slack.enabled and slack.approver_group:
        from bot.slack.grants import SlackUserGroupGrants

        slack_group = SlackUserGroupGrants(slack, store)
        closing.push_async_callback(slack_group.close)
        sources["slack"] = slack_group
    return sources


@dataclass(frozen=True)
class SupervisorsOverTemporal:
    """bot.commands.WorkerControl through Temporal: the supervisors on any host, by their control
    task queues (worker.control; a restart that waits is the demo's paused restart,
    refund_bot.demos)."""

    client: Client
    temporal: TemporalSettings

    async def supervisor_hosts(self) -> list[str]:
        t = self.temporal
        return await supervisor_hosts(self.client, t.namespace, t.control_task_queue)

    async def restart(
        self, host: str | None, while_down: Callable[[], Awaitable[None]] | None = None
    ) -> RestartReport:
        t = self.temporal
        queue = t.control_task_queue
        supervisor = None
        if host is not None:
            # The supervisor alive there now: the order is its alone, not a replacement's.
            known = await supervisors(self.client, t.namespace, queue) or {}
            if host in known and known[host] is None:
                # It heartbeated, then stopped: lost. (One never heard from gets the order, which
                # no one takes after PICKUP_TIMEOUT if no supervisor runs there.)
                raise SupervisorGone(f"No Worker supervisor answers on host {host!r}")
            supervisor = known.get(host)
        try:
            if while_down is None:
                return await request_worker_restart(self.client, queue, host, supervisor=supervisor)
            return await paused_restart(self.client, queue, host, while_down, supervisor=supervisor)
        except NoSupervisorAnswers as err:
            raise SupervisorGone(str(err)) from err

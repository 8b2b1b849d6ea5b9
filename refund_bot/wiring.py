"""Which chat platforms this process serves, built from settings.

The Worker receives the platforms' outbound halves from here (injection keeps worker/ and agent/
free of bot/ imports), and the commands their way to the Worker supervisors (bot/ free of worker/).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from temporalio.client import Client

from agent.activities.authorize import GrantSource
from agent.activities.notify import ThreadPoster
from agent.settings import AgentSettings, TemporalSettings
from agent.stores.database import database_for
from agent.stores.grants import GrantStore
from bot.discord.settings import DiscordSettings
from bot.local.thread_store import LocalThreadStore
from bot.slack.settings import SlackSettings
from worker.control import RestartReport, paused_worker_restart, request_worker_restart
from worker.supervisor import WorkerSupervisor, supervisor_hosts

# A platform's SDK (discord.py, slack_sdk) is imported only when that platform is configured: a
# Worker's start-up, the cost of every crash, does not pay for SDKs it will not use.


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
        from bot.slack.outbound import SlackThreadPoster

        posters["slack"] = SlackThreadPoster.from_settings(slack)
    if discord.enabled:
        from bot.discord.outbound import DiscordThreadPoster

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
        from bot.discord.grants import DiscordRoleGrants

        sources["discord"] = DiscordRoleGrants(discord, store)
    if slack.enabled and slack.approver_group:
        from bot.slack.grants import SlackUserGroupGrants

        sources["slack"] = SlackUserGroupGrants(slack, store)
    return sources


@dataclass(frozen=True)
class SupervisorsOverTemporal:
    """bot.commands.WorkerControl through Temporal: the supervisors on any host, by their control
    task queues (worker.control)."""

    client: Client
    temporal: TemporalSettings

    async def supervisor_hosts(self) -> list[str]:
        t = self.temporal
        return await supervisor_hosts(self.client, t.namespace, t.control_task_queue)

    async def restart(
        self, host: str | None, while_down: Callable[[], Awaitable[None]] | None = None
    ) -> RestartReport:
        queue = self.temporal.control_task_queue
        if while_down is None:
            return await request_worker_restart(self.client, queue, host)
        return await paused_worker_restart(self.client, queue, host, while_down)


@dataclass(frozen=True)
class SupervisorInProcess:
    """bot.commands.WorkerControl over this process's own supervisor (`refund-bot demo`, tests):
    the same calls, without the trip through Temporal."""

    supervisor: WorkerSupervisor

    async def supervisor_hosts(self) -> list[str]:
        return [self.supervisor.host]

    async def restart(
        self, host: str | None, while_down: Callable[[], Awaitable[None]] | None = None
    ) -> RestartReport:
        if host not in (None, self.supervisor.host):
            raise ValueError(f"this process supervises {self.supervisor.host!r}, not {host!r}")
        return await self.supervisor.restart(kill=True, while_down=while_down)

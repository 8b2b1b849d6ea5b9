"""The Discord client's tests share its network edges and one way to connect it.

    connected(FakeDiscordAPI, settings, router, commands, grants) -> Bot: the real client logged
        in over REST and handed its GUILD_CREATE; Bot.gateway feeds it what the gateway would
    StubTemporal, FakeRestart, StagingDemos: what the commands call, recorded

Used by the client tests (tests/test_discord_client.py) and the hostile-input properties.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from temporalio.service import RPCError, RPCStatusCode

from agent.models import Actor
from agent.stores.grants import GrantStore
from bot.commands import ChannelRef, CommandReply, Commands
from bot.discord.client import RefundBotClient, build_client
from bot.discord.grants import DiscordRoleGrants
from bot.discord.settings import DiscordSettings
from demo.stage import Frame, Stage
from demo.stages import PlatformStages
from harness.conditions import wait_for
from harness.fakes.discord_api import FakeDiscordAPI
from harness.recording_router import RecordingRouter
from tests.support.discord_guild import CUSTOMER, GUILD, SUPPORT

# -- the network edge: a recording router, a stub Temporal client, a fake restart ---------------


def _not_found(workflow_id: str) -> RPCError:
    return RPCError(f"workflow not found for ID: {workflow_id}", RPCStatusCode.NOT_FOUND, b"")


# A Signal as WorkflowHandle.signal takes it (the Workflow's method, or its name); or a query.
Signal = str | Callable[..., object]


@dataclass
class StubHandle:
    temporal: StubTemporal
    workflow_id: str

    async def signal(self, name: Signal, *args: Any, **kwargs: Any) -> None:
        self.temporal.calls.append(("signal", self.workflow_id, name))
        self.temporal.signalled.append((self.workflow_id, args))
        if self.temporal.fail_with is not None:
            raise self.temporal.fail_with
        if self.workflow_id not in self.temporal.running:
            raise _not_found(self.workflow_id)

    async def describe(self, *args: Any, **kwargs: Any) -> Any:
        # /refund-status's read; a stub has no conversation to describe, so: no such conversation.
        self.temporal.calls.append(("describe", self.workflow_id, ""))
        raise _not_found(self.workflow_id)


@dataclass
class StubTemporal:
    running: set[str] = field(default_factory=set)
    calls: list[tuple[str, str, Signal]] = field(default_factory=list)
    fail_with: Exception | None = None
    signalled: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)  # (id, args)
    # What visibility lists for /refund-queue: executions with their search attributes.
    listed: list[SimpleNamespace] = field(default_factory=list)

    def get_workflow_handle(self, workflow_id: str) -> StubHandle:
        return StubHandle(self, workflow_id)

    def list_workflows(self, query: str) -> AsyncIterator[SimpleNamespace]:
        self.calls.append(("list_workflows", "", query))

        async def listed() -> AsyncIterator[SimpleNamespace]:
            for execution in self.listed:
                yield execution

        return listed()


@dataclass
class RestartReport:
    old_pid: int | None = 4100
    new_pid: int = 4200
    seconds_to_ready: float = 0.42
    host: str = "test-host"
    supervisor_pid: int | None = 4000
    seconds_paused: float = 0.0


@dataclass
class FakeRestart:
    """Stands in for the supervisors (bot.commands.WorkerControl): two hosts answer."""

    hosts: tuple[str, ...] = ("test-host", "host-b")
    calls: list[str | None] = field(default_factory=list)

    async def supervisor_hosts(self) -> list[str]:
        return list(self.hosts)

    async def restart(self, host: str | None, while_down: object = None) -> RestartReport:
        self.calls.append(host)
        return RestartReport(host=host or self.hosts[0])


@dataclass
class StagingDemos:
    """Stands in for the story (bot.commands.SideBySideDemo): each command it gets posts a frame
    at the channel's top level through the stage it was handed, as the story's first moment
    posts in the channel; so a command that reached it shows in Discord."""

    calls: list[tuple[str, Stage, ChannelRef]] = field(default_factory=list)
    stages: PlatformStages = field(default_factory=PlatformStages)

    async def command(
        self, action: str, stage: Stage, channel: ChannelRef, seconds: float | None = None
    ) -> CommandReply:
        self.calls.append((action, stage, channel))
        await stage.post_frame(channel, Frame(f"DEMO {action or 'start'}"))
        return CommandReply(text=f"demo {action or 'start'}")


def discord_actor(user_id: int) -> Actor:
    return Actor(platform="discord", user_id=str(user_id))


@dataclass
class Bot:
    client: RefundBotClient
    api: FakeDiscordAPI
    router: RecordingRouter

    def gateway(self, event: str, data: dict[str, Any]) -> None:
        """Hand one dispatch to discord.py's ConnectionState, as its gateway reader does."""
        self.client._connection.parsers[event](data)

    async def post(self, channel_id: int, author_id: int, content: str, **kw: Any) -> str:
        """A member posts; returns the message id."""
        event = self.api.user_message(channel_id, author_id, content, **kw)
        self.gateway("MESSAGE_CREATE", event)
        return event["id"]

    async def open_conversation(self, text: str = "My lamp arrived broken") -> int:
        """The customer's first message; returns the thread id, once the router has it."""
        before = len(self.router.arrived)
        message_id = await self.post(SUPPORT, CUSTOMER, text)
        await wait_for(self.routed_after(before), what="the opening message routed")
        thread_id = int(message_id)
        # Discord then tells the bot about the thread it created.
        self.gateway("THREAD_CREATE", self.api.thread_create_event(thread_id))
        return thread_id

    def routed_after(self, count: int) -> Callable[[], Awaitable[bool]]:
        async def probe() -> bool:
            return len(self.router.arrived) > count

        return probe


@asynccontextmanager
async def connected(
    api: FakeDiscordAPI,
    settings: DiscordSettings,
    router: RecordingRouter,
    commands: Commands,
    store: GrantStore,
    **kwargs: Any,
) -> AsyncIterator[Bot]:
    """A freshly built client, logged in over REST and handed its GUILD_CREATE; no gateway."""
    grants = DiscordRoleGrants(settings, store, http=None)
    if "can_approve" not in kwargs:
        kwargs["grants"] = grants
    client = build_client(settings, router, commands, **kwargs)
    try:
        await client.login(api.token)  # GET /users/@me, /oauth2/applications/@me, setup_hook
        bot = Bot(client, api, router)
        bot.gateway("GUILD_CREATE", api.guild_create_event(GUILD))
        yield bot
    finally:
        await client.close()
        await grants.close()


def custom_ids(message: dict[str, Any]) -> list[str]:
    return [c["custom_id"] for row in message["components"] for c in row["components"]]

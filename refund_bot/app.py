"""`refund-bot run`: the main job, wired from settings.

    Temporal (embedded if nothing answers) -> supervised Worker -> router + inbox -> platforms
    stop (a signal, the terminal's /quit): platforms -> router calls in flight -> Worker -> Temporal

Embedded Temporal when nothing answers at the configured address, the supervised Worker (its own
process, so it can really die), the router and its inbox, and every platform whose credentials are
set; the local terminal support channel when none are (or when asked for), if stdin is a terminal.
One platform ending or failing stops neither the others nor the Worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client

from agent.codec_keys import ensure_codec_key, key_file
from agent.settings import AgentSettings, TemporalSettings
from agent.stores.database import database_for
from agent.stores.grants import GrantStore
from agent.temporal_client import connect
from bot import hold as hold_store
from bot import inbox as inbox_store
from bot.commands import Commands
from bot.conversations import RPC_TIMEOUT
from bot.discord.settings import DiscordSettings
from bot.draining_router import DrainingRouter
from bot.hold import HoldSwitch
from bot.inbox import Inbox
from bot.local import thread_store as threads_store
from bot.local.terminal import LocalChannel
from bot.platform_health import PlatformHealth
from bot.slack.settings import SlackSettings
from refund_bot.status import first_status, log_status_every, say
from refund_bot.wiring import grant_sources, local_thread_store
from worker.control import request_worker_restart
from worker.lifecycle import to_the_end
from worker.runner import prepare_stores
from worker.server import EmbeddedTemporal
from worker.supervisor import WorkerSupervisor

log = logging.getLogger(__name__)

# How long a stop waits for router calls in flight: one Temporal call's timeout, then the router
# keeps the message in the inbox instead.
DRAIN_TIMEOUT = RPC_TIMEOUT.total_seconds() + 1.0


@dataclass
class Stack:
    """Everything a platform adapter needs, running."""

    temporal: TemporalSettings
    settings: AgentSettings
    client: Client
    supervisor: WorkerSupervisor
    router: DrainingRouter
    commands: Commands
    web_ui: str | None
    server: EmbeddedTemporal
    inbox: Inbox


@contextlib.asynccontextmanager
async def running_stack(
    temporal: TemporalSettings, settings: AgentSettings, worker_env: dict[str, str] | None = None
) -> AsyncIterator[Stack]:
    """Temporal (embedded if needed), the supervised Worker, the router's inbox delivery.

    Leaving it (normally, by an error, or cancelled by a stop signal) waits for the router calls
    still in flight, then stops the Worker, then the server it started: each `async with` below
    stops what it started even if a later step failed.
    """
    data_dir = Path(settings.data_dir)
    database = database_for(settings)
    await prepare_stores(settings)  # migrates the agent's stores and seeds the demo data
    await database.migrate(inbox_store.SCHEMA, hold_store.SCHEMA, threads_store.SCHEMA)
    # Encryption is on by default: with no key configured, one is generated into the data
    # directory, where the Worker child (which inherits DATA_DIR) reads it too.
    keys, generated = ensure_codec_key(settings)
    if generated is not None:
        print(
            f"Generated codec key {generated.key_id!r} in {key_file(data_dir)} (mode 0600): it "
            "encrypts every conversation in Temporal. Keep it; other hosts need it in CODEC_KEYS.",
            flush=True,
        )
    async with EmbeddedTemporal(temporal, data_dir) as server:
        client = await connect(temporal, address=server.address, keys=keys)
        supervisor = WorkerSupervisor(
            temporal.model_copy(update={"address": server.address}),
            client=client,
            env=worker_env,
            log_path=data_dir / "worker.log",
        )
        async with supervisor:
            hold = HoldSwitch(database, settings.hold_before_refund)
            inbox = Inbox(database)
            router = DrainingRouter(
                client, temporal.task_queue, inbox, hold.enabled, decider=settings.agent_decider
            )
            commands = Commands(
                client,
                lambda: request_worker_restart(client, temporal.control_task_queue),
                settings,
                GrantStore(database),
                hold,
            )
            delivery = asyncio.create_task(router.run_delivery(), name="inbox delivery")
            try:
                yield Stack(
                    temporal=temporal,
                    settings=settings,
                    client=client,
                    supervisor=supervisor,
                    router=router,
                    commands=commands,
                    web_ui=server.ui_url,
                    server=server,
                    inbox=inbox,
                )
            finally:
                # The platforms stopped taking events; what they handed over ends (delivered, or
                # kept in the inbox) before the Worker and Temporal stop underneath it.
                await to_the_end(router.drain(DRAIN_TIMEOUT))
                delivery.cancel()
                await asyncio.gather(delivery, return_exceptions=True)


@dataclass
class Platform:
    """One chat platform this process serves: its task and its health."""

    task: asyncio.Task[None]
    health: PlatformHealth


def stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except ValueError:  # closed
        return False


async def _local_channel(channel: LocalChannel, health: PlatformHealth) -> None:
    health.connected()
    try:
        await channel.run()
    finally:
        health.stopped()


def start_platforms(stack: Stack, *, local: bool) -> list[Platform]:
    """Every platform whose credentials are set; the terminal channel when asked for or when none
    are, if stdin is a terminal (a service manager's /dev/null is not)."""
    settings = stack.settings
    slack, discord = SlackSettings(), DiscordSettings()
    sources = grant_sources(settings, slack, discord)
    store = GrantStore(database_for(settings))
    platforms: list[Platform] = []

    def start(name: str, serve: Coroutine[Any, Any, None], health: PlatformHealth) -> None:
        platforms.append(Platform(asyncio.create_task(serve, name=name), health))

    if slack.enabled:
        from bot.slack.app import build_app, serve
        from bot.slack.links import order_finder

        app = build_app(
            slack,
            stack.router,
            stack.commands,
            find_by_order=order_finder(stack.client),
            grants=sources.get("slack", store),
        )
        health = PlatformHealth("slack")
        start("slack", serve(app, slack, health=health), health)
    if discord.enabled:
        from bot.discord.client import build_client
        from bot.discord.client import serve as serve_discord

        client = build_client(
            discord, stack.router, stack.commands, grants=sources.get("discord", store)
        )
        health = PlatformHealth("discord")
        start("discord", serve_discord(client, discord, health=health), health)
    if local or not platforms:
        if stdin_is_terminal():
            channel = LocalChannel(local_thread_store(settings), stack.router, stack.commands)
            health = PlatformHealth("local")
            start("local", _local_channel(channel, health), health)
        elif platforms:
            say("The terminal channel is not opened: stdin is not a terminal.")
        else:
            say(
                "The terminal channel is not opened (stdin is not a terminal) and no chat "
                "platform is configured: running Temporal and the Worker only, as a service, "
                "until SIGTERM."
            )
    return platforms


async def serve_platforms(platforms: list[Platform]) -> None:
    """Until the terminal channel ends (/quit, end of input), or forever (until cancelled).

    A Slack or Discord task that ends is logged and shown down; the rest keep running.
    """
    running = {p.task: p for p in platforms}
    while running:
        done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            platform = running.pop(task)
            error = task.exception()
            why = f"{type(error).__name__}: {error}" if error else "it returned"
            if platform.health.name == "local":
                # /quit or the end of input (a closed terminal reads as an error): the person at
                # the terminal ended the run.
                log.info("The terminal channel ended (%s): stopping", why)
                return
            log.error(
                "%s stopped (%s); the other platforms, the Worker and Temporal keep running",
                platform.health.name, why, exc_info=error,
            )  # fmt: skip
            platform.health.down(why)
    await asyncio.Event().wait()  # no platform left (or none at all): serve until stopped


async def run(temporal: TemporalSettings, settings: AgentSettings, *, local: bool) -> None:
    async with running_stack(temporal, settings) as stack:
        if stack.server.origin.startswith("reused"):
            say(
                f"Using the Temporal server already answering at {stack.server.address} "
                f"({stack.server.origin}); refund-bot will not stop it."
            )
        if stack.web_ui:
            say(f"Temporal Web UI: {stack.web_ui}")
        platforms = start_platforms(stack, local=local)
        healths = [p.health for p in platforms]
        status = asyncio.create_task(log_status_every(stack, healths), name="status")
        try:
            say(await first_status(stack, healths))
            await serve_platforms(platforms)
        finally:
            # Stop every platform before the stack (router calls, Worker, Temporal) stops.
            status.cancel()
            for platform in platforms:
                platform.task.cancel()
            stopped = asyncio.gather(status, *(p.task for p in platforms), return_exceptions=True)
            await to_the_end(stopped)
            for health in healths:
                health.stopped()

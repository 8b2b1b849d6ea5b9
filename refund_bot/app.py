"""`refund-bot run`: the main job, wired from settings.

Embedded Temporal when nothing answers at the configured address, the supervised Worker (its own
process, so it can really die), the router and its inbox, and every platform whose credentials are
set; the local terminal support channel when none are (or when asked for).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from agent.codec_keys import ensure_codec_key, key_file
from agent.settings import AgentSettings, TemporalSettings
from agent.stores.grants import GrantStore
from agent.temporal_client import connect
from bot.commands import Commands
from bot.conversations import ConversationRouter
from bot.discord.settings import DiscordSettings
from bot.hold import HoldSwitch
from bot.inbox import Inbox
from bot.local.terminal import LocalChannel
from bot.slack.settings import SlackSettings
from refund_bot.wiring import grant_sources, local_thread_store
from worker.control import request_worker_restart
from worker.runner import prepare_stores
from worker.server import EmbeddedTemporal
from worker.supervisor import WorkerSupervisor

log = logging.getLogger(__name__)


@dataclass
class Stack:
    """Everything a platform adapter needs, running."""

    temporal: TemporalSettings
    settings: AgentSettings
    client: Client
    supervisor: WorkerSupervisor
    router: ConversationRouter
    commands: Commands
    web_ui: str | None


@contextlib.asynccontextmanager
async def running_stack(
    temporal: TemporalSettings, settings: AgentSettings, worker_env: dict[str, str] | None = None
) -> AsyncIterator[Stack]:
    """Temporal (embedded if needed), the supervised Worker, the router's inbox delivery."""
    data_dir = Path(settings.data_dir)
    await prepare_stores(settings)  # creates the data directory and seeds the demo data
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
        await supervisor.start()
        hold = HoldSwitch(data_dir / "bot.sqlite", settings.hold_before_refund)
        router = ConversationRouter(
            client,
            temporal.task_queue,
            Inbox(data_dir / "inbox.sqlite"),
            hold.enabled,
            decider=settings.agent_decider,
        )
        commands = Commands(
            client,
            lambda: request_worker_restart(client, temporal.control_task_queue),
            settings,
            GrantStore(settings.grants_db),
            hold,
        )
        delivery = asyncio.create_task(router.run_delivery())
        try:
            yield Stack(temporal, settings, client, supervisor, router, commands, server.ui_url)
        finally:
            delivery.cancel()
            await supervisor.stop()


async def run(temporal: TemporalSettings, settings: AgentSettings, *, local: bool) -> None:
    slack, discord = SlackSettings(), DiscordSettings()
    async with running_stack(temporal, settings) as stack:
        if stack.web_ui:
            print(f"Temporal Web UI: {stack.web_ui}", flush=True)
        platforms: list[asyncio.Task[None]] = []
        sources = grant_sources(settings, slack, discord)
        store = GrantStore(settings.grants_db)
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
            platforms.append(asyncio.create_task(serve(app, slack), name="slack"))
        if discord.enabled:
            from bot.discord.client import build_client
            from bot.discord.client import serve as serve_discord

            client = build_client(
                discord, stack.router, stack.commands, grants=sources.get("discord", store)
            )
            platforms.append(asyncio.create_task(serve_discord(client, discord), name="discord"))
        if local or not platforms:
            channel = LocalChannel(local_thread_store(settings), stack.router, stack.commands)
            platforms.append(asyncio.create_task(channel.run(), name="local"))
        # Until one platform ends (the terminal's /quit) or fails, or run() itself is cancelled;
        # then stop every platform before the stack (Worker, Temporal) stops underneath them.
        try:
            done, _ = await asyncio.wait(platforms, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in platforms:
                task.cancel()
            await asyncio.gather(*platforms, return_exceptions=True)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

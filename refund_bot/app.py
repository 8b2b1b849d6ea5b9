"""`refund-bot run` (the main job) and `refund-bot bot` (the chat half alone), wired from settings.

    run: Temporal (embedded if nothing answers) -> supervised Worker -> router + inbox -> platforms
    bot: Temporal (TEMPORAL_ADDRESS, never embedded)                  -> router + inbox -> platforms
    both: /healthz and /metrics (refund_bot/ops.py), the status line
    stop (a signal, the terminal's /quit): platforms -> router calls in flight -> Worker -> Temporal

`run`: embedded Temporal when nothing answers at the configured address, the supervised Worker
(its own process, so it can really die), the router and its inbox, and every platform whose
credentials are set; the local terminal support channel when none are (or when asked for), if
stdin is a terminal. `bot`: Slack and Discord, the router and its inbox, for Workers that run
elsewhere (`refund-bot worker`): any number of replicas behind a load balancer for Slack's HTTP
mode; Discord's one gateway connection per token is held by one of them (a lease). One platform
ending or failing stops neither the others nor the Worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client

from agent.codec import NoCodecKey
from agent.codec_keys import codec_keys, ensure_codec_key, key_file
from agent.settings import AgentSettings, TemporalSettings
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from agent.temporal_client import connect
from agent.visibility import ensure_registered
from bot import hold as hold_store
from bot import inbox as inbox_store
from bot import lease
from bot.commands import Commands
from bot.conversations import RPC_TIMEOUT
from bot.discord.gateway_lease import DatabaseLease, lease_name, serve_holding_lease
from bot.discord.settings import DiscordSettings
from bot.draining_router import DrainingRouter
from bot.hold import HoldSwitch
from bot.inbox import Inbox
from bot.local import thread_store as threads_store
from bot.local.terminal import LocalChannel
from bot.platform_health import PlatformHealth
from bot.slack.settings import SlackSettings
from refund_bot import demos as demo_hooks
from refund_bot.ops import Ops, OpsRefused, serving_ops
from refund_bot.stack import Stack
from refund_bot.status import first_status, log_status_every, say
from refund_bot.wiring import SupervisorsOverTemporal, grant_sources, local_thread_store
from worker.lifecycle import to_the_end
from worker.runner import prepare_stores
from worker.server import EmbeddedTemporal
from worker.settings import OFF, ProcessSettings
from worker.supervisor import WorkerSupervisor
from worker.telemetry import metric_meter

log = logging.getLogger(__name__)

# How long a stop waits for router calls in flight: one Temporal call's timeout, then the router
# keeps the message in the inbox instead.
DRAIN_TIMEOUT = RPC_TIMEOUT.total_seconds() + 1.0


@contextlib.asynccontextmanager
async def running_router(
    client: Client,
    temporal: TemporalSettings,
    settings: AgentSettings,
    child_env: Mapping[str, str] | None = None,
) -> AsyncIterator[Stack]:
    """The router, its inbox delivery and the commands, on `client`. `child_env`: what the
    Worker's environment adds to this process's, for /refund-demo's plain-loop process too.

    Leaving it waits for the router calls still in flight (each ends, or keeps its message in the
    inbox), then stops the delivery: before whatever runs underneath (Worker, Temporal) stops.
    """
    database = database_for(settings)
    await database.migrate(
        inbox_store.SCHEMA,
        hold_store.SCHEMA,
        threads_store.SCHEMA,
        lease.SCHEMA,
    )
    hold = HoldSwitch(database, settings.hold_before_refund)
    inbox = Inbox(database)
    router = DrainingRouter(
        client,
        temporal.task_queue,
        inbox,
        hold.enabled,
        decider=settings.agent_decider,
        timing=settings.timing(),
        meter=metric_meter(),
    )
    workers = SupervisorsOverTemporal(client, temporal)
    demos = demo_hooks.SideBySide(client, temporal, settings, inbox, workers, child_env or {})
    commands = Commands(client, workers, settings, GrantStore(database), hold, demos)
    delivery = asyncio.create_task(router.run_delivery(), name="inbox delivery")
    try:
        yield Stack(temporal, settings, client, router, commands, inbox)
    finally:
        # The platforms stopped taking events; what they handed over ends (delivered, or kept in
        # the inbox) before the Worker and Temporal stop underneath it.
        await to_the_end(router.drain(DRAIN_TIMEOUT))
        # A /refund-demo story told here ends with this process: its plain loop stops too.
        await to_the_end(demos.aclose())
        delivery.cancel()
        await asyncio.gather(delivery, return_exceptions=True)


@contextlib.asynccontextmanager
async def running_stack(
    temporal: TemporalSettings,
    settings: AgentSettings,
    worker_env: dict[str, str] | None = None,
    *,
    host: str | None = None,
    workers: int = 1,
) -> AsyncIterator[Stack]:
    """Temporal (embedded if needed), the supervised Worker(s), the router's inbox delivery.

    `workers`: Worker processes polling at once (REFUND_BOT_WORKERS), beside the warm standby.

    Leaving it (normally, by an error, or cancelled by a stop signal) waits for the router calls
    still in flight, then stops the Worker, then the server it started: each `async with` below
    stops what it started even if a later step failed.
    """
    data_dir = Path(settings.data_dir)
    await prepare_stores(settings)  # migrates the agent's stores and seeds the demo data
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
        await ensure_registered(client)  # before the Worker starts: it needs them to poll
        supervisor = WorkerSupervisor(
            temporal.model_copy(update={"address": server.address}),
            client=client,
            env=worker_env,
            log_path=data_dir / "worker.log",
            host=host,
            workers=workers,
            control=demo_hooks.supervisor_control,
        )
        async with supervisor, running_router(client, temporal, settings, worker_env) as stack:
            stack.supervisor, stack.server, stack.web_ui = supervisor, server, server.ui_url
            stack.host = supervisor.host
            yield stack


@contextlib.asynccontextmanager
async def running_bot(
    temporal: TemporalSettings, settings: AgentSettings, *, host: str | None = None
) -> AsyncIterator[Stack]:
    """The router, its inbox and the commands on the configured Temporal: no server, no Worker.

    Its codec keys are the deployment's (CODEC_KEYS, or DATA_DIR/codec.key): it never makes one
    up, since Workers elsewhere could not read what it wrote.
    """
    keys = codec_keys(settings)
    if not keys:
        raise NoCodecKey  # before anything is written: a mistake changes nothing
    await prepare_stores(settings)  # REFUND_ADMINS' grants, so someone can /refund-grant
    client = await connect(temporal, keys=keys)
    await ensure_registered(client)  # /refund-queue reads them; the router's starts set one
    async with running_router(client, temporal, settings) as stack:
        stack.host = host
        yield stack


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


def start_platforms(
    stack: Stack, closing: contextlib.AsyncExitStack, *, local: bool
) -> list[Platform]:
    """Every platform whose credentials are set; the terminal channel when asked for or when none
    are, if stdin is a terminal (a service manager's /dev/null is not). `closing` closes the
    connections the platforms' grant sources keep, once the platforms have stopped."""
    settings = stack.settings
    slack, discord = SlackSettings(), DiscordSettings()
    sources = grant_sources(settings, slack, discord, closing=closing)
    stack.commands.use_platform_grants(sources)  # who may run a staff command, read live
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

        assert discord.token is not None
        health = PlatformHealth("discord")

        def discord_client() -> Coroutine[Any, Any, None]:
            # A fresh client each time this process takes the gateway: a closed one is spent.
            client = build_client(
                discord, stack.router, stack.commands, grants=sources.get("discord", store)
            )
            return serve_discord(client, discord, health=health)

        # One gateway connection per token, whichever process sharing DATABASE_URL holds it.
        lease = DatabaseLease(
            database_for(settings),
            lease_name(discord.token.get_secret_value()),
            host=stack.host or socket.gethostname(),
            ttl=discord.gateway_lease_seconds,
        )
        start("discord", serve_holding_lease(lease, health, discord_client), health)
    if stack.supervisor is None:
        return platforms  # `refund-bot bot`: Slack and Discord only (a checked setting)
    if local or not platforms:
        if stdin_is_terminal():
            channel = LocalChannel(
                local_thread_store(settings),
                stack.router,
                stack.commands,
                grants=sources.get("local", store),
            )
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


async def run(
    temporal: TemporalSettings,
    settings: AgentSettings,
    *,
    local: bool,
    process: ProcessSettings | None = None,
    metrics: str | None = None,
) -> None:
    """`refund-bot run`. `metrics`: this process's exporter URL, when metrics are on."""
    process = process or ProcessSettings()
    async with (
        running_stack(temporal, settings, host=process.host, workers=process.workers) as stack,
        contextlib.AsyncExitStack() as connections,
    ):
        assert stack.server is not None
        if stack.server.origin.startswith("reused"):
            say(
                f"Using the Temporal server already answering at {stack.server.address} "
                f"({stack.server.origin}); refund-bot will not stop it."
            )
        if stack.web_ui:
            say(f"Temporal Web UI: {stack.web_ui}")
        await serve(stack, start_platforms(stack, connections, local=local), process, metrics)


async def bot(
    temporal: TemporalSettings,
    settings: AgentSettings,
    *,
    process: ProcessSettings | None = None,
    metrics: str | None = None,
) -> None:
    """`refund-bot bot`: the chat platforms and the router, for Workers that run elsewhere."""
    process = process or ProcessSettings()
    async with (
        running_bot(temporal, settings, host=process.host) as stack,
        contextlib.AsyncExitStack() as connections,
    ):
        await serve(stack, start_platforms(stack, connections, local=False), process, metrics)


async def serve(
    stack: Stack, platforms: list[Platform], process: ProcessSettings, metrics: str | None
) -> None:
    """Serve the platforms, /healthz and /metrics and the status line until the end (the terminal
    channel ended, or a stop signal cancelled this); then stop every platform before the stack
    (router calls, Worker, Temporal) stops."""
    healths = [p.health for p in platforms]
    async with contextlib.AsyncExitStack() as ops:
        if metrics is not None and process.metrics_address != OFF:
            ops_state = Ops(
                stack.client,
                stack.inbox,
                healths,
                metrics,
                metric_meter(),
                task_queue=stack.temporal.task_queue,
            )
            try:
                await ops.enter_async_context(serving_ops(process.metrics_address, ops_state))
                stack.ops = f"/healthz on http://{process.metrics_address}"
            except OpsRefused as err:
                # Like a Slack port already in use: one line; the conversations carry on.
                log.error("%s", err)
                stack.ops = "/healthz not served (port in use)"
        status = asyncio.create_task(log_status_every(stack, healths), name="status")
        try:
            say(await first_status(stack, healths))
            await serve_platforms(platforms)
        finally:
            status.cancel()
            for platform in platforms:
                platform.task.cancel()
            stopped = asyncio.gather(status, *(p.task for p in platforms), return_exceptions=True)
            await to_the_end(stopped)
            for health in healths:
                health.stopped()

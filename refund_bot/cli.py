"""`refund-bot`: the console script.

refund-bot run       the main job: embedded Temporal (if needed), the supervised Worker, and every
                     platform whose credentials are set (the local terminal channel when none are);
                     SIGTERM, SIGHUP or SIGINT stop it (and its children) gracefully, exit 0
refund-bot bot       Slack and Discord, the router and the inbox, for Workers that run elsewhere
refund-bot demo      the unattended story, start to finish, on embedded defaults; --side-by-side:
                     the same crash without and with Temporal, in two threads
refund-bot worker    one Worker (the supervisor runs this as its child); --supervised: a
                     supervisor and its Worker child, which /crash-worker <host> can reach
refund-bot status ID what survives of a conversation, read from Event History (no Worker needed)
refund-bot conversations           the open conversations and the Workflow version each started on;
                                   --drain closes those this code does not run (docs/versioning.md)
refund-bot codec-server            the payload codec over HTTP, for the Temporal Web UI and CLI
refund-bot discord sync-commands   register the Discord application commands
refund-bot stripe-setup            pay the demo orders in Stripe test mode (once, sk_test_ key)

Every command reads and checks its settings first (refund_bot.config): a mistake is one line on
stderr naming the setting and what to do, and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys

from temporalio.service import RPCError, RPCStatusCode

from agent import tracing
from agent.codec import CodecError, NoCodecKey
from agent.stores.database import DatabaseRefused, DatabaseUnavailable
from agent.visibility import SearchAttributesMissing, ensure_registered
from refund_bot import config
from refund_bot.config import Config, ConfigError
from worker.exit import exit_now
from worker.lifecycle import until_stopped, watch_lifeline
from worker.server import TemporalServerError
from worker.supervisor import WorkerStartError
from worker.telemetry import MetricsRefused

log = logging.getLogger(__name__)

DESCRIPTION = "A Slack and Discord front end for a durable customer-support refund agent."
# What a conversation's id looks like (bot/ids.py), for `status` and its errors.
ID_FORMS = (
    "local-local-support-t1 (the terminal's thread t1), "
    "slack-<team>-<channel>-<thread ts> (e.g. slack-T0123ABCD-C0456EFGH-1732860000.000100), "
    "discord-<guild id>-<thread id>"
)


class Refused(Exception):
    """A command cannot do what was asked; the message is the one line that says why."""


async def _promoted() -> None:
    """A standby's wait: the supervisor writes a line on our stdin to make us the active Worker.
    End of file instead: the supervisor let this standby go, so it leaves without polling."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    if not await reader.readline():
        exit_now(0)


async def _worker(cfg: Config, standby: bool = False, metrics_slot: int = 0) -> None:
    from agent.codec_keys import codec_keys
    from agent.temporal_client import connect
    from refund_bot.demos import worker_interceptors
    from refund_bot.wiring import grant_sources, outbound_posters
    from worker.runner import run_worker
    from worker.settings import slot_address

    # Under a supervisor: exit with it, even if it dies by SIGKILL where prctl cannot tie us to it.
    supervised = watch_lifeline()
    keys = codec_keys(cfg.agent)
    if not keys:
        raise NoCodecKey  # a Worker never writes a conversation to Temporal in clear
    # Its supervisor's slot for it: a host's Workers and standby each have their own port.
    _metrics(
        slot_address(cfg.process.worker_metrics_address, metrics_slot),
        "WORKER_METRICS_ADDRESS",
    )
    client = await connect(cfg.temporal, keys=keys)
    if not supervised:  # a supervisor made sure of them before it started this Worker
        await ensure_registered(client)
    # The platforms' kept-alive connections, closed as the Worker stops (SIGTERM cancels this).
    async with contextlib.AsyncExitStack() as connections:
        await run_worker(
            client,
            cfg.temporal,
            cfg.agent,
            outbound_posters(cfg.agent, cfg.slack, cfg.discord, closing=connections),
            grant_sources(cfg.agent, cfg.slack, cfg.discord, closing=connections),
            host=cfg.process.host,
            cached_conversations=cfg.process.cached_conversations,
            sticky_timeout=cfg.process.sticky_timeout,
            # Under systemd or Kubernetes nobody else releases a SIGKILLed predecessor's
            # conversations; a supervisor does it for its own children, from the death on.
            release_previous=not supervised,
            # The wait itself, made only once the standby is ready: a standby stopped while still
            # starting never made a coroutine it would leave unawaited.
            go=_promoted if standby else None,
            interceptors=worker_interceptors(),
        )


async def _supervised_worker(cfg: Config) -> None:
    from agent.codec_keys import codec_keys
    from agent.temporal_client import connect
    from refund_bot.demos import supervisor_control
    from worker.supervisor import WorkerSupervisor

    keys = codec_keys(cfg.agent)
    if not keys:
        raise NoCodecKey
    client = await connect(cfg.temporal, keys=keys)
    await ensure_registered(client)  # before the Worker starts: it needs them to poll
    # The child inherits this environment (its settings, WORKER_METRICS_ADDRESS included).
    # The presenter's paused restart is served beside /crash-worker's, on any host.
    async with WorkerSupervisor(
        cfg.temporal,
        client=client,
        host=cfg.process.host,
        workers=cfg.process.workers,
        control=supervisor_control,
    ) as supervisor:
        log.info(
            "Supervising Worker pid %s on %s; /crash-worker %s restarts it",
            ", ".join(map(str, supervisor.pids)), supervisor.host, supervisor.host,
        )  # fmt: skip
        await asyncio.Event().wait()


def _metrics(address: str, setting: str) -> None:
    """This process's metrics at `address` (the SDK's exporter), unless off. A port already taken
    is one line and no metrics: the conversations matter more than their counters."""
    from worker.settings import OFF
    from worker.telemetry import install_metrics

    if address == OFF:
        return
    try:
        install_metrics(address)
    except MetricsRefused as err:
        log.error("%s=%s: %s; set another address or off", setting, address, err)
    else:
        log.info("metrics on http://%s/metrics", address)


def _bot_metrics(cfg: Config) -> str | None:
    """The exporter behind the bot process's own /metrics (refund_bot/ops.py), unless off."""
    from worker.settings import OFF
    from worker.telemetry import install_metrics_on_loopback

    if cfg.process.metrics_address == OFF:
        return None
    return install_metrics_on_loopback()


async def _status(cfg: Config, workflow_id: str) -> None:
    from agent.codec_keys import codec_keys
    from agent.history import what_survives
    from agent.temporal_client import connect

    client = await connect(cfg.temporal, keys=codec_keys(cfg.agent))
    try:
        survivors = await what_survives(client, workflow_id)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        raise Refused(
            f"no conversation {workflow_id!r} at TEMPORAL_ADDRESS={cfg.temporal.address} "
            f"(namespace {cfg.temporal.namespace}): give a Workflow ID such as {ID_FORMS}"
        ) from err
    print(survivors.model_dump_json(indent=2))


async def _conversations(cfg: Config, unsupported: bool, drain: bool) -> None:
    from agent.codec_keys import codec_keys
    from agent.temporal_client import connect
    from refund_bot import conversations
    from refund_bot.wiring import outbound_posters

    client = await connect(cfg.temporal, keys=codec_keys(cfg.agent))
    await ensure_registered(client)  # the listing queries them
    found = await conversations.open_conversations(client, unsupported=unsupported or drain)
    if not drain:
        for conversation in found:
            print(conversation.line())
        print(f"{len(found)} open conversation(s)")
        return
    async with contextlib.AsyncExitStack() as connections:
        posters = outbound_posters(cfg.agent, cfg.slack, cfg.discord, closing=connections)
        for conversation in found:
            print(await conversations.drain(client, cfg.agent, posters, conversation))
    print(f"{len(found)} conversation(s) this code does not run")


async def _codec_server(cfg: Config) -> None:
    from agent.codec_keys import codec_keys
    from worker.codec_server import CodecServerRefused, serve

    keys = codec_keys(cfg.agent)
    if not keys:
        raise NoCodecKey
    try:
        await serve(cfg.codec_server, keys, cfg.temporal)
    except (CodecServerRefused, OSError) as err:
        raise Refused(f"codec server not started: {err}") from err


async def _run(cfg: Config, local: bool) -> None:
    from refund_bot.app import run

    metrics = _bot_metrics(cfg)
    await run(cfg.temporal, cfg.agent, local=local, process=cfg.process, metrics=metrics)


async def _bot(cfg: Config) -> None:
    from refund_bot.app import bot

    await bot(cfg.temporal, cfg.agent, process=cfg.process, metrics=_bot_metrics(cfg))


async def _demo(cfg: Config, side_by_side: bool) -> int:
    from refund_bot.app import running_stack
    from refund_bot.demos import tell

    async with running_stack(cfg.temporal, cfg.agent) as stack:
        return await tell(stack, cfg.agent, side_by_side=side_by_side)


async def _discord_sync(cfg: Config) -> None:
    import aiohttp
    import discord

    from bot.discord.commands_spec import sync_commands

    try:
        names = await sync_commands(cfg.discord)
    except discord.LoginFailure as err:
        raise Refused(
            "DISCORD_TOKEN was refused by Discord: copy the bot's token again (Developer Portal > "
            "Bot > Reset Token)"
        ) from err
    except discord.Forbidden as err:
        raise Refused(
            "Discord refused to register the commands: invite the bot with the "
            "applications.commands scope (docs/discord.md), and check DISCORD_GUILD_ID"
        ) from err
    except aiohttp.ClientConnectionError as err:
        where = cfg.discord.api_url or "Discord's API"
        raise Refused(f"cannot reach {where} (DISCORD_API_URL): {err}") from err
    print(f"Registered {len(names)} Discord commands: {', '.join(names)}")


async def _stripe_setup(cfg: Config) -> None:
    from agent.stripe_setup import create_test_payments

    for order_number, intent in await create_test_payments(cfg.agent):
        print(f"order {order_number}: paid in Stripe test mode by {intent}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="refund-bot",
        description=DESCRIPTION,
        epilog="Settings come from the environment or a .env file; .env.example lists them all.",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="-v: info; -vv: refund-bot's debug too"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, details: str = "") -> argparse.ArgumentParser:
        return commands.add_parser(
            name, help=summary, description=summary + (f". {details}" if details else "")
        )

    run = command(
        "run",
        "the main job: Temporal, the supervised Worker and every configured chat platform",
        "Starts an embedded Temporal dev server when none answers at TEMPORAL_ADDRESS, and the "
        "local terminal support channel when neither Slack nor Discord is configured",
    )
    run.add_argument(
        "--local", action="store_true", help="open the terminal channel even with Slack/Discord"
    )
    command(
        "bot",
        "the chat platforms, the router and its inbox, for Workers that run elsewhere",
        "Slack and/or Discord (one of them configured), on TEMPORAL_ADDRESS (never an embedded "
        "server); /healthz and /metrics at METRICS_ADDRESS. Any number of replicas for Slack; "
        "Discord's one gateway connection per token is held by one of them",
    )
    demo = command(
        "demo",
        "the unattended crash-and-resume story on a fresh order; non-zero if an invariant broke",
        "Honours AGENT_DECIDER: with openai the model makes the story's decisions",
    )
    demo.add_argument(
        "--side-by-side",
        action="store_true",
        help="the same crash without Temporal (a plain process) and with it, in two threads; "
        "non-zero if any count differs from the docs page's",
    )
    worker = command(
        "worker",
        "one Temporal Worker for the refund conversations (run's supervisor runs it)",
        "Any number, on any host, on the same TEMPORAL_ADDRESS, namespace and task queue; "
        "/metrics at WORKER_METRICS_ADDRESS",
    )
    worker.add_argument(
        "--supervised",
        action="store_true",
        help="run a supervisor and the Worker as its child: restarted when it dies, and "
        "/crash-worker <REFUND_BOT_HOST> reaches it",
    )
    worker.add_argument(
        "--standby",
        action="store_true",
        help="get ready (imports, connection, stores), then poll only once a line arrives on stdin",
    )
    worker.add_argument(
        "--metrics-slot",
        type=int,
        default=0,
        metavar="N",
        help="serve /metrics on WORKER_METRICS_ADDRESS's port plus N (a supervisor gives each of "
        "its Workers and its standby their own)",
    )
    status = command(
        "status",
        "what survives of a conversation, read from Temporal's Event History (no Worker needed)",
    )
    status.add_argument(
        "workflow_id", metavar="WORKFLOW_ID", help=f"the conversation's Workflow ID: {ID_FORMS}"
    )
    listing = command(
        "conversations",
        "the open conversations, the Workflow version each started on, and whether it runs here",
        "Read from Temporal's visibility (no Worker needed, no customer text)",
    )
    listing.add_argument(
        "--unsupported", action="store_true", help="only those this code does not run"
    )
    listing.add_argument(
        "--drain",
        action="store_true",
        help="close each conversation this code does not run: one sentence in its thread (what "
        "became of the request, from the refund's owner), then terminate it",
    )
    command(
        "codec-server",
        "the payload codec over HTTP, so the Web UI and CLI can read Event History (loopback)",
    )
    discord = command("discord", "Discord set-up: sync-commands registers the bot's commands")
    discord_commands = discord.add_subparsers(
        dest="discord_command", required=True, metavar="COMMAND"
    )
    summary = "register the application commands (manifests/discord-commands.json)"
    discord_commands.add_parser(
        "sync-commands",
        help=summary,
        description=f"{summary} with DISCORD_TOKEN: to DISCORD_GUILD_ID when set (instant), "
        "globally otherwise",
    )
    command(
        "stripe-setup",
        "pay the demo orders with Stripe test-mode PaymentIntents (once, with a sk_test_ key)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        # Before any client connects: the Temporal interceptor is given at connection.
        traced = tracing.configure(args.command)
    except tracing.TracingRefused as err:
        print(f"refund-bot: {err}", file=sys.stderr)
        exit_now(2)
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.command == "worker" else logging.WARNING,
        # Traced, a line written while handling a message ends with its trace and span ids.
        format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        + (tracing.LOG_FORMAT_SUFFIX if traced else ""),
    )
    if args.verbose > 1:  # our own debug lines (the status line every minute), not every library's
        for package in ("agent", "bot", "worker", "refund_bot"):
            logging.getLogger(package).setLevel(logging.DEBUG)
    # The long-running commands stop gracefully on SIGTERM, SIGHUP and SIGINT, and then exit 0.
    commands_by_name = {
        "run": (config.RUN, lambda cfg: until_stopped(_run(cfg, args.local))),
        "demo": (config.DEMO, lambda cfg: until_stopped(_demo(cfg, args.side_by_side))),
        "bot": (config.BOT, lambda cfg: until_stopped(_bot(cfg))),
        "worker": (
            config.WORKER,
            lambda cfg: until_stopped(
                _supervised_worker(cfg)
                if args.supervised
                else _worker(cfg, args.standby, args.metrics_slot)
            ),
        ),
        "discord": (config.DISCORD_SYNC, _discord_sync),
        "stripe-setup": (config.STRIPE_SETUP, _stripe_setup),
        "status": (config.STATUS, lambda cfg: _status(cfg, args.workflow_id)),
        "conversations": (
            config.STATUS,
            lambda cfg: _conversations(cfg, args.unsupported, args.drain),
        ),
        "codec-server": (config.CODEC_SERVER, lambda cfg: until_stopped(_codec_server(cfg))),
    }
    checks, work = commands_by_name[args.command]
    address = "?"
    try:
        cfg = config.check(config.load(), *checks)
        address = cfg.temporal.address
        code = asyncio.run(work(cfg)) or 0
    except ConfigError as err:
        print(f"refund-bot: {err}", file=sys.stderr)
        code = 2
    except DatabaseRefused as err:
        print(f"refund-bot: {err.message}", file=sys.stderr)  # never its password either
        code = 1
    except (
        Refused,
        TemporalServerError,
        CodecError,
        DatabaseUnavailable,
        MetricsRefused,
        SearchAttributesMissing,
        WorkerStartError,
    ) as err:
        # A codec problem names the key id, never the key; a database, never its password.
        print(f"refund-bot: {err}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:  # before the signal handlers were installed: nothing had started
        code = 130
    except RuntimeError as err:
        if not str(err).startswith("Failed client connect"):
            raise
        print(
            f"refund-bot: cannot reach Temporal at TEMPORAL_ADDRESS={address}: start it "
            "(`refund-bot run` embeds one unless TEMPORAL_EMBEDDED=false), or point "
            "TEMPORAL_ADDRESS at a running server",
            file=sys.stderr,
        )
        code = 1
    exit_now(code)

"""`refund-bot`: the console script.

refund-bot run       the main job: embedded Temporal (if needed), the supervised Worker, and every
                     platform whose credentials are set (the local terminal channel when none are);
                     SIGTERM, SIGHUP or SIGINT stop it (and its children) gracefully, exit 0
refund-bot demo      the unattended story, start to finish, on embedded defaults
refund-bot worker    one Worker (the supervisor runs this as its child)
refund-bot status ID what survives of a conversation, read from Event History (no Worker needed)
refund-bot discord sync-commands   register the Discord application commands
refund-bot stripe-setup            pay the demo orders in Stripe test mode (once, sk_test_ key)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from pydantic import ValidationError

from agent.settings import AgentSettings, TemporalSettings
from worker.exit import exit_now
from worker.lifecycle import until_stopped, watch_lifeline


def _settings() -> tuple[TemporalSettings, AgentSettings]:
    try:
        return TemporalSettings(), AgentSettings()
    except ValidationError as err:
        # A clear refusal at start-up (a live Stripe key, a malformed value), never a traceback.
        messages = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())
        sys.exit(f"refund-bot: invalid settings: {messages}")


async def _worker() -> None:
    from agent.temporal_client import connect
    from refund_bot.wiring import grant_sources, outbound_posters
    from worker.runner import run_worker

    # Under a supervisor: exit with it, even if it dies by SIGKILL where prctl cannot tie us to it.
    watch_lifeline()
    temporal, settings = _settings()
    client = await connect(temporal)
    await run_worker(
        client, temporal, settings, outbound_posters(settings), grant_sources(settings)
    )


async def _status(workflow_id: str) -> None:
    from agent.history import what_survives
    from agent.temporal_client import connect

    temporal, _ = _settings()
    client = await connect(temporal)
    print((await what_survives(client, workflow_id)).model_dump_json(indent=2))


async def _run(local: bool) -> None:
    from refund_bot.app import run

    temporal, settings = _settings()
    await run(temporal, settings, local=local)


async def _demo() -> int:
    from refund_bot.demo import demo

    temporal, settings = _settings()
    return await demo(temporal, settings)


async def _discord_sync() -> None:
    from bot.discord.commands_spec import sync_commands
    from bot.discord.settings import DiscordSettings

    names = await sync_commands(DiscordSettings())
    print(f"Registered {len(names)} Discord commands: {', '.join(names)}")


async def _stripe_setup() -> int:
    from agent.stripe_setup import create_test_payments

    _, settings = _settings()
    if settings.stripe_api_key is None:
        print("refund-bot: set STRIPE_API_KEY (a sk_test_ key) first", file=sys.stderr)
        return 1
    for order_number, intent in await create_test_payments(settings):
        print(f"order {order_number}: paid in Stripe test mode by {intent}")
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="refund-bot", description=__doc__.split("\n")[0])
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="-v: info; -vv: refund-bot's debug too"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="the main job (local terminal channel by default)")
    run.add_argument(
        "--local", action="store_true", help="open the terminal channel even with Slack/Discord"
    )
    commands.add_parser("demo", help="the unattended crash-and-resume story")
    commands.add_parser("worker", help="run one Worker")
    commands.add_parser("stripe-setup", help="pay the demo orders in Stripe test mode")
    discord = commands.add_parser("discord", help="Discord set-up")
    discord.add_subparsers(dest="discord_command", required=True).add_parser(
        "sync-commands", help="register the commands in manifests/discord-commands.json"
    )
    status = commands.add_parser("status", help="what survives of a conversation, from history")
    status.add_argument("workflow_id")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.command == "worker" else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.verbose > 1:  # our own debug lines (the status line every minute), not every library's
        for package in ("agent", "bot", "worker", "refund_bot"):
            logging.getLogger(package).setLevel(logging.DEBUG)
    # The long-running commands stop gracefully on SIGTERM, SIGHUP and SIGINT, and then exit 0.
    commands_by_name = {
        "run": lambda: until_stopped(_run(args.local)),
        "demo": lambda: until_stopped(_demo()),
        "worker": lambda: until_stopped(_worker()),
        "discord": _discord_sync,
        "stripe-setup": _stripe_setup,
        "status": lambda: _status(args.workflow_id),
    }
    try:
        code = asyncio.run(commands_by_name[args.command]()) or 0
    except KeyboardInterrupt:  # before the signal handlers were installed: nothing had started
        code = 130
    except RuntimeError as err:
        if not str(err).startswith("Failed client connect"):
            raise
        print(f"refund-bot: cannot reach Temporal at {TemporalSettings().address}", file=sys.stderr)
        code = 1
    exit_now(code)

"""`refund-bot`: the console script.

refund-bot run       the main job: embedded Temporal (if needed), the supervised Worker, and every
                     platform whose credentials are set (the local terminal channel when none are)
refund-bot demo      the unattended story, start to finish, on embedded defaults
refund-bot worker    one Worker (the supervisor runs this as its child)
refund-bot status ID what survives of a conversation, read from Event History (no Worker needed)
refund-bot codec-server            the payload codec over HTTP, for the Temporal Web UI and CLI
refund-bot discord sync-commands   register the Discord application commands
refund-bot stripe-setup            pay the demo orders in Stripe test mode (once, sk_test_ key)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import NoReturn

from pydantic import ValidationError

from agent.codec import CodecKeyError, NoCodecKey
from agent.settings import AgentSettings, CodecServerSettings, TemporalSettings
from worker.exit import exit_now


def _settings() -> tuple[TemporalSettings, AgentSettings]:
    try:
        return TemporalSettings(), AgentSettings()
    except ValidationError as err:
        _refuse(err)


def _refuse(err: ValidationError) -> NoReturn:
    # A clear refusal at start-up (a live Stripe key, a malformed value), never a traceback.
    messages = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())
    sys.exit(f"refund-bot: invalid settings: {messages}")


async def _worker() -> None:
    from agent.codec_keys import codec_keys
    from agent.temporal_client import connect
    from refund_bot.wiring import grant_sources, outbound_posters
    from worker.runner import run_worker

    temporal, settings = _settings()
    keys = codec_keys(settings)
    if not keys:
        raise NoCodecKey  # a Worker never writes a conversation to Temporal in clear
    client = await connect(temporal, keys=keys)
    await run_worker(
        client, temporal, settings, outbound_posters(settings), grant_sources(settings)
    )


async def _status(workflow_id: str) -> None:
    from agent.codec_keys import codec_keys
    from agent.history import what_survives
    from agent.temporal_client import connect

    temporal, settings = _settings()
    client = await connect(temporal, keys=codec_keys(settings))
    print((await what_survives(client, workflow_id)).model_dump_json(indent=2))


async def _codec_server() -> int:
    from agent.codec_keys import codec_keys
    from worker.codec_server import CodecServerRefused, serve

    temporal, settings = _settings()
    try:
        server = CodecServerSettings()
    except ValidationError as err:
        _refuse(err)
    keys = codec_keys(settings)
    if not keys:
        raise NoCodecKey
    try:
        await serve(server, keys, temporal)
    except (CodecServerRefused, OSError) as err:
        print(f"refund-bot: codec server not started: {err}", file=sys.stderr)
        return 1
    return 0


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
    parser.add_argument("-v", "--verbose", action="store_true")
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
    commands.add_parser(
        "codec-server", help="decrypt Event History for the Web UI and CLI (loopback by default)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.command == "worker" else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    commands_by_name = {
        "run": lambda: _run(args.local),
        "demo": _demo,
        "worker": _worker,
        "discord": _discord_sync,
        "stripe-setup": _stripe_setup,
        "status": lambda: _status(args.workflow_id),
        "codec-server": _codec_server,
    }
    try:
        code = asyncio.run(commands_by_name[args.command]()) or 0
    except KeyboardInterrupt:
        code = 130
    except CodecKeyError as err:
        # A missing or wrong key: one line naming the key id, never a traceback, never the key.
        print(f"refund-bot: {err}", file=sys.stderr)
        code = 1
    except RuntimeError as err:
        if not str(err).startswith("Failed client connect"):
            raise
        print(f"refund-bot: cannot reach Temporal at {TemporalSettings().address}", file=sys.stderr)
        code = 1
    exit_now(code)

"""`refund-bot`: the console script.

refund-bot run       the main job: embedded Temporal (if needed), the supervised Worker, and every
                     platform whose credentials are set (the local terminal channel when none are)
refund-bot demo      the unattended story, start to finish, on embedded defaults
refund-bot worker    one Worker (the supervisor runs this as its child)
refund-bot status ID what survives of a conversation, read from Event History (no Worker needed)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from pydantic import ValidationError

from agent.settings import AgentSettings, TemporalSettings


def _settings() -> tuple[TemporalSettings, AgentSettings]:
    try:
        return TemporalSettings(), AgentSettings()
    except ValidationError as err:
        # A clear refusal at start-up (a live Stripe key, a malformed value), never a traceback.
        messages = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())
        sys.exit(f"refund-bot: invalid settings: {messages}")


async def _worker() -> None:
    from agent.temporal_client import connect
    from refund_bot.wiring import outbound_posters
    from worker.runner import run_worker

    temporal, settings = _settings()
    client = await connect(temporal)
    await run_worker(client, temporal, settings, outbound_posters(settings))


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
    status = commands.add_parser("status", help="what survives of a conversation, from history")
    status.add_argument("workflow_id")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.command == "worker" else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "run":
        asyncio.run(_run(args.local))
    elif args.command == "demo":
        sys.exit(asyncio.run(_demo()))
    elif args.command == "worker":
        asyncio.run(_worker())
        # The Worker has shut down cleanly. Skip interpreter finalization: the SDK's native
        # threads can outlive it and abort the process (temporalio/sdk-python#300).
        logging.shutdown()
        os._exit(0)
    elif args.command == "status":
        asyncio.run(_status(args.workflow_id))

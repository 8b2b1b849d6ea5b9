"""Slack ack latency: how long Slack waits for the HTTP 200 while the agent's side is slow.

The Slack app runs in HTTP mode (aiohttp, loopback, an ephemeral port) with every request signed
as Slack signs it and the Web API pointed at the local FakeSlackApi. The router sleeps
`--router-delay` seconds per message and the commands as long per command: a stand-in for a
Temporal that is slow or timing out. Slack gives up on a request after 3 s, so the figure that
matters is the round trip to the 200, which must not include the router's time.

    .venv/bin/python -m bench.slack_ack [--requests 200] [--burst 20] [--router-delay 5]

Measured (milliseconds of HTTP round trip, client side, one process):
  cold     the first request after start (bolt's one auth.test call happens here)
  events   message events, one after another, each opening its own thread
  burst    message events, `--burst` in flight at once
  commands /refund-status slash commands, one after another
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from typing import Any

import aiohttp
from aiohttp import web

from bot.commands import CommandReply
from bot.conversations import InboundClick, InboundMessage, Routed
from bot.slack.app import build_app, http_web_app
from tests.fakes.slack_api import Delivery, FakeSlackApi, SlackSender, signed_headers
from tests.support.conditions import wait_for

SECRET = "bench-signing-secret"
CHANNEL = "C0SUPPORT"


class SlowRouter:
    """Takes `delay` seconds per call, like a router waiting on an unresponsive Temporal."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.started = 0
        self.finished = 0

    async def on_message(self, message: InboundMessage) -> Routed:
        self.started += 1
        await asyncio.sleep(self.delay)
        self.finished += 1
        return Routed.STARTED

    async def on_click(self, click: InboundClick) -> Routed:
        return await self.on_message(None)  # type: ignore[arg-type]


class SlowCommands:
    def __init__(self, router: SlowRouter) -> None:
        self.router = router

    async def refund_status(self, actor: Any, workflow_id: str) -> CommandReply:
        await self.router.on_message(None)  # type: ignore[arg-type]
        return CommandReply(text=f"{workflow_id}: fine")


def _summary(name: str, samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[max(0, round(0.95 * len(ms)) - 1)]
    return (
        f"{name:<9} n={len(ms):<4} median {statistics.median(ms):6.2f} ms   "
        f"p95 {p95:6.2f} ms   max {ms[-1]:6.2f} ms"
    )


async def run(requests: int, burst: int, delay: float) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        os.environ.pop(name, None)  # everything here is on loopback
    async with FakeSlackApi() as slack:
        router = SlowRouter(delay)
        settings = slack.app_settings(signing_secret=SECRET, support_channel=CHANNEL)
        app = build_app(settings, router, SlowCommands(router))  # type: ignore[arg-type]
        runner = web.AppRunner(http_web_app(app, SECRET), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"
        sender = SlackSender(slack)

        async with aiohttp.ClientSession() as http:

            async def timed(delivery: Delivery) -> float:
                headers = signed_headers(SECRET, delivery)
                started = time.perf_counter()
                async with http.post(url, data=delivery.body, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"HTTP {resp.status}")
                return time.perf_counter() - started

            cold = await timed(sender.post(CHANNEL, "cold start"))
            events = [await timed(sender.post(CHANNEL, f"refund {i}")) for i in range(requests)]
            bursts: list[float] = []
            for start in range(0, requests, burst):
                batch = [sender.post(CHANNEL, f"burst {i}") for i in range(start, start + burst)]
                bursts += await asyncio.gather(*(timed(d) for d in batch))
            commands = [
                await timed(
                    sender.command(
                        "/refund-status",
                        f"slack-{slack.team_id}-{CHANNEL}-1.000001",
                        user="U0ADMIN",
                        name="ada",
                    )
                )
                for _ in range(max(1, requests // 4))
            ]

            print(
                f"Slack ack latency, HTTP mode on loopback; the router takes {delay:.1f} s per "
                "call (Slack's limit is 3 s)"
            )
            print(f"cold      first request {cold * 1000:.2f} ms (includes auth.test)")
            print(_summary("events", events))
            print(_summary(f"burst{burst}", bursts))
            print(_summary("commands", commands))
            slowest = max(events + bursts + commands)
            print(
                f"slowest ack {slowest * 1000:.2f} ms, while {router.started - router.finished} "
                f"router calls of {delay:.1f} s were still running"
            )

            # Let the slow work finish, so it is seen to have run after its ack.
            async def drained() -> bool:
                return router.finished == router.started

            with contextlib.suppress(AssertionError):
                await wait_for(drained, timeout=delay + 10, interval=0.1, what="the slow work")
            print(f"router calls completed after their acks: {router.finished}/{router.started}")
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--router-delay", type=float, default=5.0)
    args = parser.parse_args()
    asyncio.run(run(args.requests, args.burst, args.router_delay))


if __name__ == "__main__":
    main()

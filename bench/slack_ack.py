"""Slack acknowledgement with 100 requests in flight: the HTTP round trip to Slack's 200.

    this process: fake Slack Web API + load generator (bench.http_load, requests signed as Slack
      signs them) -> one app process per variant on loopback (`python -m bench.slack_ack serve`)
    the commands' replies (response_url) -> a sink process (`python -m bench.slack_ack sink`)

Variants, interleaved burst by burst (their order turns every round), each app process idle (no
CPU used for 0.1 s) when its burst begins:
  refund-bot     bot.slack.app.serve in HTTP mode, as `refund-bot run` serves Slack: signature,
                 shape, the message kept, then bolt dispatches and answers
  aiohttp-floor  an aiohttp handler that reads the body and answers 200: what this web stack costs
                 with no work at all, on this machine, now
  baseline       with --baseline DIR only: refund-bot as served by the checkout in DIR (the code
                 before a change, alternated with it on the same machine at the same time)
Every app process imports what `refund-bot run` imports, so its heap (which full garbage
collections walk) is the real process's size. Its router and commands take --router-delay seconds
per call, as with an unresponsive Temporal: none of that may show in an ack. A command's reply
then goes to its response_url --router-delay seconds later, during a later burst: as to Slack's
servers, it goes to a process of its own, not to the load generator timing that burst.

Scenarios (milliseconds from writing a request to reading the last byte of its answer):
  one by one   message events, one request at a time (each opens its own thread)
  burst        --in-flight message events sent at once on as many keep-alive connections
  commands     --in-flight /refund-status slash commands sent at once
plus `cold`, each app's first request. A PNG of the bursts' distributions goes to --plot.

    .venv/bin/python -m bench.slack_ack [--in-flight 100] [--bursts 20] [--router-delay 5]
        [--baseline ../refund-bot-before]
        [--profile slack-ack.html]   (pyinstrument, the refund-bot app process, whole run;
                                      .html for a browser, any other name for text)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import SecretStr

from agent.stores.sqlite import SqliteDatabase
from bench import percentile
from bench.http_load import Connection, build_request
from bench.plot import axes, cdf, default_path, save
from bench.proc import wait_idle
from bot.commands import CommandReply, Conversation
from bot.conversations import InboundClick, InboundMessage, Kept, Routed, UnreadableEvent
from bot.inbox import Inbox
from bot.slack.app import EVENTS_PATH, build_app, serve
from bot.slack.settings import SlackSettings
from harness import free_port
from harness.conditions import wait_for
from harness.fakes.slack_api import Delivery, FakeSlackApi, SlackSender, signed_headers
from worker.exit import exit_now
from worker.lifecycle import spawn_child, until_stopped, watch_lifeline

SECRET = "bench-signing-secret"
CHANNEL = "C0SUPPORT"
VARIANTS = ("refund-bot", "aiohttp-floor")
BASELINE = "baseline"
HOST = "127.0.0.1"


# ---------------------------------------------------------------------------------------------
# The app process
# ---------------------------------------------------------------------------------------------


class SlowRouter:
    """Writes a message ahead to a real inbox (SQLite, committed) as the router does before the
    ack, then takes `delay` seconds per call, like a router waiting on an unresponsive Temporal."""

    def __init__(self, delay: float, inbox: Inbox) -> None:
        self.delay = delay
        self.inbox = inbox
        self.started = 0
        self.finished = 0

    async def keep(self, message: InboundMessage) -> Kept | Routed:
        seq = await self.inbox.put("message", message, message.thread.thread)
        return Kept(message.event_id, seq, message.thread.thread)

    async def on_message(self, message: InboundMessage | None) -> Routed:
        self.started += 1
        await asyncio.sleep(self.delay)
        self.finished += 1
        return Routed.STARTED

    async def on_click(self, click: InboundClick) -> Routed:
        return await self.on_message(None)

    async def keep_unreadable(self, event: UnreadableEvent) -> None:
        raise AssertionError(f"the benchmark sends only what Slack sends: {event.reason}")


class SlowCommands:
    def __init__(self, router: SlowRouter) -> None:
        self.router = router

    async def refund_status(self, actor: Any, conversation: Conversation) -> CommandReply:
        await self.router.on_message(None)
        found = conversation if isinstance(conversation, str) else await conversation()
        return found if isinstance(found, CommandReply) else CommandReply(text=f"{found}: fine")


def aiohttp_floor() -> web.Application:
    async def events(request: web.Request) -> web.Response:
        await request.read()
        return web.Response()

    web_app = web.Application()
    web_app.router.add_post(EVENTS_PATH, events)
    return web_app


async def _serve_until_cancelled(web_app: web.Application, port: int) -> None:
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, HOST, port).start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


async def serve_variant(variant: str, port: int, api_url: str, token: str, delay: float) -> None:
    watch_lifeline()  # the load generator's process gone: this one goes too
    settings = SlackSettings(
        _env_file=None,
        bot_token=SecretStr(token),
        signing_secret=SecretStr(SECRET),
        support_channel=CHANNEL,
        api_url=api_url,
        port=port,
    )
    router = SlowRouter(delay, Inbox(SqliteDatabase(Path(tempfile.mkdtemp(prefix="slack-ack-")))))
    # SlowCommands answers /refund-status only: the one command the benchmark sends.
    app = build_app(settings, router, SlowCommands(router))  # type: ignore[arg-type]
    try:
        if variant == "refund-bot":
            await serve(app, settings)  # what `refund-bot run` runs for Slack in HTTP mode
        else:
            await _serve_until_cancelled(aiohttp_floor(), port)
    finally:
        print(json.dumps({"router_started": router.started, "router_finished": router.finished}))


async def sink(port: int) -> None:
    """Answers every POST as Slack answers a response_url: 200, `ok`. Counts them."""
    watch_lifeline()
    received = 0

    async def hook(request: web.Request) -> web.Response:
        nonlocal received
        await request.read()
        received += 1
        return web.Response(text="ok")

    web_app = web.Application()
    web_app.router.add_post("/{tail:.*}", hook)
    try:
        await _serve_until_cancelled(web_app, port)
    finally:
        print(json.dumps({"replies": received}))


def sink_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench.slack_ack sink")
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(until_stopped(sink(parser.parse_args(argv).port)))
    sys.stdout.flush()
    exit_now(0)


def serve_main(argv: list[str]) -> None:
    # What `refund-bot run` has imported by the time it serves Slack: the heap a full garbage
    # collection walks is the real process's size, not a small benchmark's.
    import refund_bot.app  # noqa: F401

    parser = argparse.ArgumentParser(prog="bench.slack_ack serve")
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--api-url", required=True)
    parser.add_argument("--router-delay", type=float, required=True)
    parser.add_argument("--profile", type=Path)
    args = parser.parse_args(argv)
    token = os.environ["BENCH_SLACK_BOT_TOKEN"]
    profiler = None
    if args.profile is not None:
        from pyinstrument import Profiler

        profiler = Profiler(async_mode="disabled", interval=0.0005)
        profiler.start()
    main = serve_variant(args.variant, args.port, args.api_url, token, args.router_delay)
    asyncio.run(until_stopped(main))
    if profiler is not None:
        profiler.stop()
        if args.profile.suffix == ".html":
            args.profile.write_text(profiler.output_html())
        else:
            args.profile.write_text(profiler.output_text(unicode=True, color=False, show_all=True))
    sys.stdout.flush()
    exit_now(0)


# ---------------------------------------------------------------------------------------------
# The load generator
# ---------------------------------------------------------------------------------------------


async def _listening(port: int, what: str) -> None:
    """Until a process started here accepts a connection on `port`."""

    async def accepts() -> Connection | None:
        try:
            return await Connection.open(HOST, port)
        except OSError:
            return None

    first = await wait_for(accepts, timeout=60, interval=0.1, what=f"{what} listening")
    await first.close()


class App:
    """One variant's app process and its keep-alive connections."""

    def __init__(self, variant: str, proc: asyncio.subprocess.Process, port: int) -> None:
        self.variant = variant
        self.proc = proc
        self.port = port
        self.connections: list[Connection] = []

    @classmethod
    async def start(
        cls,
        variant: str,
        slack: FakeSlackApi,
        delay: float,
        profile: Path | None,
        baseline: Path | None = None,
    ) -> App:
        port = free_port()
        served = "refund-bot" if variant == BASELINE else variant
        argv = [sys.executable, "-m", "bench.slack_ack", "serve", served, "--port", str(port)]
        argv += ["--api-url", slack.url, "--router-delay", str(delay)]
        if profile is not None and variant == "refund-bot":
            argv += ["--profile", str(profile)]
        if variant == BASELINE:
            # `-m` would import this checkout's modules: the baseline's own come first instead.
            assert baseline is not None
            run = "import os, runpy; os.chdir({!r}); runpy.run_module('bench.slack_ack', "
            run += "run_name='__main__')"
            argv[1:3] = ["-c", run.format(str(baseline))]
        env = {**os.environ, "BENCH_SLACK_BOT_TOKEN": slack.token}
        for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
            env.pop(name, None)  # everything here is on loopback
        proc = await spawn_child(
            argv,
            on_parent_death=signal.SIGTERM,
            lifeline=True,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,  # its stop announcement; its answers say enough
        )
        await _listening(port, variant)
        return cls(variant, proc, port)

    async def connect(self, count: int) -> None:
        self.connections = [await Connection.open(HOST, self.port) for _ in range(count)]

    async def send(self, deliveries: list[Delivery]) -> list[float]:
        """All at once, one per connection: the seconds each took to its answer."""
        requests = [
            build_request(HOST, self.port, EVENTS_PATH, d.body.encode(), signed_headers(SECRET, d))
            for d in deliveries
        ]
        # The load generator's own garbage collections must not count as the app's latency:
        # none runs while requests are in flight, one runs after.
        gc.disable()
        try:
            answers = await asyncio.gather(
                *(conn.send(req) for conn, req in zip(self.connections, requests, strict=False))
            )
        finally:
            gc.enable()
            gc.collect()
        for status, _ in answers:
            if status != 200:
                raise RuntimeError(f"{self.variant} answered HTTP {status}")
        return [seconds for _, seconds in answers]

    async def stop(self) -> dict[str, int]:
        for conn in self.connections:
            await conn.close()
        self.proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(self.proc.communicate(), timeout=30)
        lines = out.decode().strip().splitlines()
        return json.loads(lines[-1]) if lines else {}


def _row(name: str, samples: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    return (
        f"  {name:<14} n={len(ms):<5} p50 {percentile(ms, 50):7.2f}   p95 {percentile(ms, 95):7.2f}"
        f"   p99 {percentile(ms, 99):7.2f}   max {max(ms):7.2f} ms"
    )


def _turned(items: tuple[str, ...], i: int) -> list[str]:
    return list(items[i % len(items) :] + items[: i % len(items)])


async def start_sink() -> tuple[asyncio.subprocess.Process, str]:
    port = free_port()
    proc = await spawn_child(
        [sys.executable, "-m", "bench.slack_ack", "sink", "--port", str(port)],
        on_parent_death=signal.SIGTERM,
        lifeline=True,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    await _listening(port, "the reply sink")
    return proc, f"http://{HOST}:{port}"


async def run(in_flight: int, bursts: int, delay: float, one_by_one: int, plot: Path,
              profile: Path | None, baseline: Path | None) -> None:  # fmt: skip
    variants = VARIANTS + ((BASELINE,) if baseline else ())
    sink_proc, sink_url = await start_sink()
    async with FakeSlackApi() as slack:
        sender = SlackSender(slack)
        apps = {v: await App.start(v, slack, delay, profile, baseline) for v in variants}
        results: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
        try:
            for app in apps.values():
                await app.connect(in_flight)
                results[app.variant]["cold"] = await app.send([sender.post(CHANNEL, "cold")])
                await app.send([sender.post(CHANNEL, "warm") for _ in range(in_flight)])

            async def scenario(
                name: str, count: int, rounds: int, make: Callable[[int], Delivery]
            ) -> None:
                for i in range(rounds):
                    for variant in _turned(variants, i):
                        app = apps[variant]
                        batch = [make(n) for n in range(count)]
                        await wait_idle(app.proc.pid)
                        results[variant].setdefault(name, []).extend(await app.send(batch))

            await scenario("one by one", 1, one_by_one, lambda n: sender.post(CHANNEL, "one"))
            await scenario("burst", in_flight, bursts, lambda n: sender.post(CHANNEL, f"b{n}"))
            status = f"slack-{slack.team_id}-{CHANNEL}-1.000001"
            await scenario(
                "commands",
                in_flight,
                max(1, bursts // 2),
                lambda n: sender.command(
                    "/refund-status",
                    status,
                    user="U0ADMIN",
                    name="ada",
                    response_url=f"{sink_url}/hooks/commands/{slack.team_id}/{uuid.uuid4().hex}",
                ),
            )
        finally:
            await asyncio.sleep(delay + 1.0)  # the slow router calls end before their apps stop
            counts = {v: await app.stop() for v, app in apps.items()}
            sink_proc.send_signal(signal.SIGTERM)
            sink_out, _ = await asyncio.wait_for(sink_proc.communicate(), timeout=30)
    replies = json.loads(sink_out.decode().strip().splitlines()[-1])["replies"]

    print(
        f"Slack acks over HTTP on loopback, {in_flight} in flight; router and commands take "
        f"{delay:.1f} s per call; milliseconds to the whole answer (Slack allows 3,000):"
    )
    for name in ("cold", "one by one", "burst", "commands"):
        print(f"{name}:")
        for variant in variants:
            print(_row(variant, results[variant][name]))
    ours = results["refund-bot"]
    slowest = max(max(s) for s in ours.values())
    print(f"refund-bot's slowest ack: {slowest * 1000:.2f} ms, every router call taking {delay} s")
    for variant, count in counts.items():
        if variant != "aiohttp-floor":
            print(
                f"{variant}: router and command calls finished "
                f"{count.get('router_finished')}/{count.get('router_started')}"
            )
    print(f"command replies received by the sink: {replies}")
    floor = statistics.median(results["aiohttp-floor"]["burst"])
    over = (f"{v} {statistics.median(results[v]['burst']) / floor:.2f}x" for v in variants)
    print(f"burst medians over the aiohttp floor: {', '.join(over)}")

    fig, (events_ax, commands_ax) = axes(
        f"Slack ack latency, {in_flight} requests in flight (CDF)",
        "milliseconds to the answer",
        "share of requests",
        columns=2,
    )
    for variant in variants:
        cdf(events_ax, variant, [s * 1000 for s in results[variant]["burst"]])
        cdf(commands_ax, variant, [s * 1000 for s in results[variant]["commands"]])
    events_ax.set_title("message events")
    commands_ax.set_title("/refund-status commands")
    for ax in (events_ax, commands_ax):
        ax.set_xscale("log")
        ax.legend()
    print(f"plot: {save(fig, plot)}")


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        serve_main(sys.argv[2:])
    if sys.argv[1:2] == ["sink"]:
        sink_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--bursts", type=int, default=20)
    parser.add_argument("--one-by-one", type=int, default=100)
    parser.add_argument("--router-delay", type=float, default=5.0)
    parser.add_argument("--plot", type=Path, default=default_path("slack_ack"))
    parser.add_argument("--profile", type=Path, help="pyinstrument HTML of the refund-bot app")
    parser.add_argument(
        "--baseline", type=Path, help="a checkout whose refund-bot runs as one more variant"
    )
    args = parser.parse_args()
    asyncio.run(
        run(args.in_flight, args.bursts, args.router_delay, args.one_by_one, args.plot,
            args.profile, args.baseline and args.baseline.resolve())
    )  # fmt: skip
    exit_now(0)


if __name__ == "__main__":
    main()

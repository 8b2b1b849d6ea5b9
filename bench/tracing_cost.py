"""What tracing costs a turn: bench.turn_latency's turns with OpenTelemetry off and on.

    this process: an OTLP/HTTP sink (it takes every export and keeps nothing) and the driver
      -> the dev server refund-bot embeds
      <- two Worker processes (bench.turn_workers): one with no OTEL_* variable set (tracing off:
         no provider, no interceptor), one with OTEL_EXPORTER_OTLP_ENDPOINT at the sink (every
         span made, batched, encoded and sent, as a deployment's are)

A turn is bench.turn_latency's: the customer_message Signal to the completion of the post that
asks the next question, both read from Event History timestamps (the server's clock), so what the
driver's own tracing costs is not in it. Traced, the driver sends each answer inside a span, as
the terminal channel does, so the Worker makes the conversation's whole tree. One conversation of
each per round, the order turning every round.

    .venv/bin/python -m bench.tracing_cost [--rounds 100]   (4 turns a round: 400 per variant)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web
from temporalio.client import Client

from agent import tracing
from bench import percentile, run_benchmark
from bench.server import embedded_server
from bench.turn_latency import ANSWERS, OPENING, Events, is_signal, seconds_between
from bench.turn_workers import CONVERTERS, local_threads, queue
from bot.local.thread_store import LocalThreadStore
from harness import free_port
from harness.conversation import LocalConversation
from worker.lifecycle import spawn_child, terminate


@asynccontextmanager
async def otlp_sink() -> AsyncIterator[tuple[str, list[int]]]:
    """An OTLP/HTTP endpoint on loopback that answers 200 and counts the bytes it was sent."""
    received: list[int] = []

    async def traces(request: web.Request) -> web.Response:
        received.append(len(await request.read()))
        return web.Response(status=200, content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        await runner.cleanup()


async def workers(
    address: str, data_dir: Path, prefix: str, env: dict[str, str]
) -> asyncio.subprocess.Process:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = await spawn_child(
        [sys.executable, "-m", "bench.turn_workers", "--address", address,
         "--data-dir", str(data_dir), "--queue", prefix],
        on_parent_death=signal.SIGTERM,
        lifeline=True,
        stdout=asyncio.subprocess.PIPE,
        env={**clean, **env},
    )  # fmt: skip
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 120)
    if line.strip() != b"ready":
        raise RuntimeError(f"bench.turn_workers did not start: {line!r}")
    return proc


async def conversation(
    client: Client, threads: LocalThreadStore, task_queue: str, traced: bool
) -> list[float]:
    conv = LocalConversation(client, threads, task_queue)
    with tracing.span("local.message", "server", platform="local") if traced else _nothing():
        handle = await conv.open(OPENING)
    events = Events(handle, client.data_converter)
    await events.next(events.said)
    turns = []
    for answer in ANSWERS:
        with tracing.span("local.message", "server", platform="local") if traced else _nothing():
            await conv.reply(answer)
        signaled = await events.next(is_signal)
        turns.append(seconds_between(signaled, await events.next(events.said)))
    await handle.terminate("benchmark done")
    return turns


def _nothing() -> contextlib.nullcontext[None]:
    return contextlib.nullcontext()


def _row(name: str, seconds: list[float]) -> str:
    ms = [s * 1000 for s in seconds]
    return (
        f"  {name:<14} n={len(ms):<5} p50 {percentile(ms, 50):6.1f}   p95 {percentile(ms, 95):6.1f}"
        f"   p99 {percentile(ms, 99):6.1f}   mean {statistics.fmean(ms):6.1f} ms"
    )


async def main(rounds: int) -> None:
    async with otlp_sink() as (endpoint, received):
        # The driver traces like a bot process does (the same sink), for the traced variant.
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
        tracing.configure("bench")
        with tempfile.TemporaryDirectory() as tmp:
            data_dir = Path(tmp)
            async with embedded_server(data_dir / "temporal") as server:
                prefix = f"tracing-{uuid.uuid4().hex[:6]}"
                off = await workers(server.address, data_dir, f"{prefix}-off", {})
                on = await workers(
                    server.address,
                    data_dir,
                    f"{prefix}-on",
                    {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "500"},
                )
                try:
                    results = await _interleaved(server.address, data_dir, prefix, rounds)
                finally:
                    await terminate(off, grace=10)
                    await terminate(on, grace=10)
        await asyncio.to_thread(tracing.flush)  # the sink answers on this loop
        print(
            f"A turn: the customer's Signal to the next question's post completing, from Event "
            f"History; {rounds} rounds of {len(ANSWERS)} turns, interleaved on one dev server:"
        )
        for name, turns in results.items():
            print(_row(name, turns))
        off_, on_ = results["tracing off"], results["tracing on"]
        print(
            f"  on - off, medians: {(statistics.median(on_) - statistics.median(off_)) * 1000:+.2f}"
            f" ms a turn; p99 {percentile(on_, 99) / percentile(off_, 99):.2f}x; the sink took "
            f"{len(received)} exports, {sum(received) / 1024:.0f} KiB"
        )


async def _interleaved(
    address: str, data_dir: Path, prefix: str, rounds: int
) -> dict[str, list[float]]:
    threads = local_threads(data_dir)
    converter = CONVERTERS["encrypted"]
    plain = await Client.connect(address, data_converter=converter)
    traced = await Client.connect(
        address, data_converter=converter, interceptors=tracing.interceptors()
    )
    runs = {
        "tracing off": lambda: conversation(
            plain, threads, queue(f"{prefix}-off", "encrypted"), False
        ),
        "tracing on": lambda: conversation(
            traced, threads, queue(f"{prefix}-on", "encrypted"), True
        ),
    }
    names = list(runs)
    for name in names:  # warm-up
        await runs[name]()
    results: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        for name in names[i % 2 :] + names[: i % 2]:
            results[name] += await runs[name]()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    run_benchmark(main(args.rounds))

"""Recovery with no supervisor: a `refund-bot worker` SIGKILLed with N open conversations and
started again at once, as systemd (`Restart=always`, `RestartSec=0`) or a Kubernetes container
restart would.

    N conversations opened (each asked its first question, sticky to the Worker) -> SIGKILL the
    Worker -> its successor started at once -> a reply to one conversation every --every s from
    the kill on -> each reply's answer (the workflow task that posts the next question,
    completed: the server's timestamp)

Two successors, in alternate rounds on one dev server (the one `refund-bot run` embeds), each
round opening N conversations of its own:

- `release`: what ships: the successor resets its dead predecessor's conversations as it starts
  (worker.runner.reset_previous_here);
- `none`: the successor started as a supervisor's child (a lifeline), which leaves the release to
  a supervisor that is not there: what an unsupervised Worker did before. A reply then waits out
  the sticky schedule-to-start timeout (WORKER_STICKY_TIMEOUT, worker.settings) on the dead queue.

    .venv/bin/python -m bench.successor_recovery [--open 500] [--rounds 2] [--replies 20]
        [--every 0.05] [--variants release none] [--plot successor_recovery.png]

`--plot` draws each successor's replies, all rounds together: when each was answered, from the kill.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from temporalio.client import Client, WorkflowHandle

from agent.settings import AgentSettings
from bench import percentile, run_benchmark
from bench.open_recovery import OPEN_TIMEOUT, answered_after, open_one, plot_answers, yes_reply
from bench.proc import wait_idle
from bench.server import embedded_server
from bench.workers import refund_bot_env, spawn_process
from harness.codec import TEST_CONVERTER
from harness.conditions import wait_for
from harness.crowd import place_crowd
from refund_bot.wiring import local_thread_store
from worker.control import worker_identity
from worker.lifecycle import terminate
from worker.pollers import worker_is_polling
from worker.runner import prepare_stores

HOST = "successor-bench"
# Each round's orders start here: a round's N are numbered on from it.
_ORDERS = iter(range(2_000_000, 10**9, 100_000))


async def _worker(
    address: str, queue: str, data_dir: Path, release: bool
) -> asyncio.subprocess.Process:
    env = {**refund_bot_env(address, queue, data_dir), "REFUND_BOT_HOST": HOST}
    # A lifeline makes the Worker take itself for a supervisor's child: no release of its own.
    argv = [sys.executable, "-m", "refund_bot", "worker"]
    return await spawn_process(argv, env, data_dir / f"{queue}.log", lifeline=not release)


async def _polling(client: Client, queue: str, pid: int) -> None:
    async def polls() -> bool:
        return await worker_is_polling(client, client.namespace, queue, worker_identity(pid, HOST))

    await wait_for(polls, timeout=120, interval=0.02, what=f"pid {pid} to poll")


async def _open(
    client: Client, settings: AgentSettings, queue: str, pid: int, n: int, prefix: str, first: int
) -> list[WorkflowHandle]:
    shoppers = await place_crowd(settings, n, prefix=prefix, first_order=first)
    threads = local_thread_store(settings)
    handles = []
    for shopper in shoppers:  # the thread store is one SQLite file
        handles.append(await open_one(client, threads, shopper, prefix, queue))
    sample = random.sample(handles, min(20, n))

    async def asked() -> bool:
        for handle in sample:
            if not await answered_after(handle, 0):
                return False
        return await wait_idle(pid, quiet=1.0, within=5.0)

    await wait_for(asked, timeout=OPEN_TIMEOUT, interval=2.0, what="every first question")
    return handles


async def _round(
    client: Client, address: str, data_dir: Path, variant: str, args: argparse.Namespace, r: int
) -> list[float]:
    """One round: N opened, the Worker killed and started again, replies sent; seconds from the
    kill to each reply's answer."""
    settings = AgentSettings(_env_file=None, data_dir=data_dir)
    queue = f"successor-{r}-{variant}"
    first = await _worker(address, queue, data_dir, release=True)
    second: asyncio.subprocess.Process | None = None
    try:
        await _polling(client, queue, first.pid)
        opened = time.monotonic()
        handles = await _open(
            client,
            settings,
            queue,
            first.pid,
            args.open,
            f"s{r}{variant[0]}",
            next(_ORDERS),
        )
        print(
            f"round {r} ({variant}): {args.open} conversations open in "
            f"{time.monotonic() - opened:.0f} s (load average {os.getloadavg()[0]:.2f})",
            flush=True,
        )
        targets = random.sample(handles, args.replies)
        killed = time.time()
        first.send_signal(signal.SIGKILL)
        second = await _worker(address, queue, data_dir, release=variant == "release")
        sent: list[float] = []
        for i, handle in enumerate(targets):
            delay = killed + i * args.every - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            sent.append(time.time())
            await handle.signal("customer_message", yes_reply(handle))
        await _polling(client, queue, second.pid)
        polling = time.time() - killed
        answered = [
            await wait_for(functools.partial(answered_after, handle, 1), timeout=120)
            for handle in targets
        ]
        from_kill = [a - killed for a in answered]
        from_signal = [a - s for a, s in zip(answered, sent, strict=True)]
        print(
            f"  {variant:<8} N={args.open}: reply answered, from the kill: p50 "
            f"{statistics.median(from_kill):.3f} s, max {max(from_kill):.3f} s; from its Signal: "
            f"p50 {statistics.median(from_signal):.3f} s, p90 {percentile(from_signal, 90):.3f} "
            f"s, max {max(from_signal):.3f} s; successor polling {polling:.3f} s after the kill; "
            f"waited > 5 s: {sum(1 for s in from_signal if s > 5)}",
            flush=True,
        )
        return from_kill
    finally:
        for proc in (first, second):
            if proc is not None:
                await terminate(proc, grace=10)


async def main(args: argparse.Namespace) -> None:
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        async with embedded_server(data_dir / "temporal") as server:
            await prepare_stores(AgentSettings(_env_file=None, data_dir=data_dir))
            client = await Client.connect(server.address, data_converter=TEST_CONVERTER)
            from_kill: dict[str, list[float]] = {v: [] for v in args.variants}
            for r in range(args.rounds):
                for variant in args.variants if r % 2 == 0 else args.variants[::-1]:
                    from_kill[variant] += await _round(
                        client, server.address, data_dir, variant, args, r
                    )
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)
    if args.plot is not None:
        title = f"{args.open:,} open conversations, the Worker SIGKILLed: replies (no supervisor)"
        plot_answers(args.plot, title, from_kill)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--open", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--replies", type=int, default=20)
    parser.add_argument("--every", type=float, default=0.05)
    parser.add_argument("--variants", nargs="+", default=["release", "none"])
    parser.add_argument("--plot", type=Path, default=None)
    run_benchmark(main(parser.parse_args()))

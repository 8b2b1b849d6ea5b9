"""How long a full garbage collection holds a Worker, by the conversations in its cache.

    N conversations opened (each asked its first question: cached by the Worker)
      -> gc.collect() in the Worker's process, timed three times -> objects tracked, the pause
      -> more conversations opened, and again, up to the largest N

One process: a dev server of its own, the Worker `refund-bot worker` builds (its cache as large as
the largest N, so nothing is evicted), and the conversations opened as the router opens them.
The pause is what the interpreter does on its own each time its heap has grown by a quarter; the
Worker reports every one (worker/gc_pauses.py), and the SDK fails a workflow task whose
activation it holds past 2 s.

    .venv/bin/python -m bench.gc_pause [--cached 500 1000 2000 3000]
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.client import WorkflowHandle

from agent.settings import AgentSettings
from bench import run_benchmark
from bench.open_recovery import answered_after, open_one
from bench.proc import rss_bytes
from harness.conditions import wait_for
from harness.crowd import at_most, place_crowd
from harness.dev_server import start_dev_server
from refund_bot.wiring import local_thread_store
from worker.runner import build_worker, prepare_stores

COLLECTIONS = 3


async def _all_asked(handles: list[WorkflowHandle]) -> bool:
    """Every conversation asked its first question (and so is in the Worker's cache)."""
    asked = await at_most(20, (functools.partial(answered_after, h, 0) for h in handles))
    return all(asked)


async def main(cached: list[int]) -> None:
    env = await start_dev_server()
    with tempfile.TemporaryDirectory() as tmp:
        settings = AgentSettings(_env_file=None, data_dir=Path(tmp))
        await prepare_stores(settings)
        threads = local_thread_store(settings)
        queue = f"gc-{uuid.uuid4().hex[:8]}"
        worker = await build_worker(
            env.client, queue, settings, {"local": threads}, cached_conversations=max(cached)
        )
        print(f"full collections in the Worker's process, {COLLECTIONS} at each step:")
        print(f"  {'cached':>7} {'objects tracked':>16} {'pause p50':>10} {'max':>8} {'RSS':>8}")
        async with env, worker:
            opened = 0
            for step, target in enumerate(sorted(cached)):
                shoppers = await place_crowd(
                    settings, target - opened, prefix=f"gc{step}-", first_order=700_000 + opened
                )
                handles = [
                    await open_one(env.client, threads, shopper, f"gc{step}", queue)
                    for shopper in shoppers
                ]

                await wait_for(
                    functools.partial(_all_asked, handles),
                    timeout=3600,
                    interval=2.0,
                    what="every first question",
                )
                opened = target
                pauses = []
                for _ in range(COLLECTIONS):
                    started = time.perf_counter()
                    gc.collect()
                    pauses.append(time.perf_counter() - started)
                tracked = len(gc.get_objects())
                print(
                    f"  {target:>7,} {tracked:>16,} {statistics.median(pauses):>9.3f}s "
                    f"{max(pauses):>7.3f}s {rss_bytes(os.getpid()) / 2**20:>6.0f}MB",
                    flush=True,
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cached", type=int, nargs="+", default=[500, 1000, 2000, 3000])
    run_benchmark(main(parser.parse_args().cached))

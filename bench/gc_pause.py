"""How long a full garbage collection holds a Worker, by the conversations in its cache.

    N conversations opened (each asked its first question: cached by the Worker)
      -> gc.collect() in the Worker's process, timed three times -> objects tracked, the pause
      -> more conversations opened, and again, up to the largest N

One process (harness.inproc.standalone_agent): a dev server of its own, the Worker `refund-bot
worker` builds (its cache as large as the largest N, so nothing is evicted), and the
conversations opened as the router opens them.
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
import time

from bench import run_benchmark
from bench.open_recovery import all_asked, open_one
from bench.proc import rss_bytes
from harness.conditions import wait_for
from harness.crowd import place_crowd
from harness.inproc import standalone_agent

COLLECTIONS = 3


async def main(cached: list[int]) -> None:
    print(f"full collections in the Worker's process, {COLLECTIONS} at each step:")
    print(f"  {'cached':>7} {'objects tracked':>16} {'pause p50':>10} {'max':>8} {'RSS':>8}")
    async with standalone_agent(cached_conversations=max(cached)) as agent:
        opened = 0
        for step, target in enumerate(sorted(cached)):
            shoppers = await place_crowd(
                agent.settings, target - opened, prefix=f"gc{step}-", first_order=700_000 + opened
            )
            handles = [
                await open_one(agent.client, agent.threads, shopper, f"gc{step}", agent.task_queue)
                for shopper in shoppers
            ]
            await wait_for(
                functools.partial(all_asked, handles),
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

"""How long a full garbage collection holds a Worker, by the conversations in its cache, with the
start's heap frozen (what `refund-bot worker` does) and left to be walked (before).

    a process per run, the two heaps alternating, `--pairs` of each:
      Worker built -> frozen (worker.gc_pauses.freeze_startup_heap) or not
        -> N conversations opened (each asked its first question: cached by the Worker)
        -> gc.collect() timed three times -> objects it walks, the pause
        -> more conversations opened, and again, up to the largest N
    -> each N: the pause's median over the runs of each heap, and frozen against scanned

Each run is a process of its own (harness.inproc.standalone_agent): a dev server, the Worker
`refund-bot worker` builds (its cache as large as the largest N, so nothing is evicted), and the
conversations opened as the router opens them.
The pause is what the interpreter does on its own each time its heap has grown by a quarter; the
Worker reports every one (worker/gc_pauses.py), and the SDK fails a workflow task whose
activation it holds past 2 s.

    .venv/bin/python -m bench.gc_pause [--cached 500 1000 2000 3000] [--pairs 2]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import statistics
import sys
import time

from bench import run_benchmark
from bench.open_recovery import all_asked, open_one
from bench.proc import rss_bytes
from harness.conditions import wait_for
from harness.crowd import place_crowd
from harness.inproc import standalone_agent
from worker.gc_pauses import freeze_startup_heap

COLLECTIONS = 3
HEAPS = ("frozen", "scanned")
ROW = "row "  # a run's result line, read by the comparison


async def one_run(cached: list[int], heap: str) -> None:
    """One process's run: its table, and a ROW line (JSON) for each N (`cached` in order)."""
    async with standalone_agent(cached_conversations=max(cached)) as agent:
        frozen = freeze_startup_heap() if heap == "frozen" else 0
        print(f"  {heap}: {frozen:,} objects frozen at the start", flush=True)
        opened = 0
        for step, target in enumerate(cached):
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
            row = {
                "cached": target,
                "walked": len(gc.get_objects()),  # what a full collection walks: frozen are not
                "p50": statistics.median(pauses),
                "max": max(pauses),
                "rss_mb": rss_bytes(os.getpid()) / 2**20,
            }
            print(
                f"  {heap:>8} {target:>7,} {row['walked']:>15,} {row['p50']:>9.3f}s "
                f"{row['max']:>7.3f}s {row['rss_mb']:>6.0f}MB",
                flush=True,
            )
            print(ROW + json.dumps(row), flush=True)


async def run_in_child(cached: list[int], heap: str) -> list[dict[str, float]]:
    """One run in a process of its own (a fresh interpreter: its heap as a Worker's starts)."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.gc_pause", "--heap", heap,
        "--cached", *map(str, cached),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None
    rows = []
    async for raw in child.stdout:
        line = raw.decode().rstrip("\n")
        if line.startswith(ROW):
            rows.append(json.loads(line[len(ROW) :]))
        else:
            print(line, flush=True)
    if await child.wait() != 0:
        raise SystemExit(f"the {heap} run failed (exit status {child.returncode})")
    return rows


async def main(cached: list[int], pairs: int) -> None:
    print(f"full collections, {COLLECTIONS} at each step, {pairs} run(s) of each heap alternating:")
    columns = ("heap", 8), ("cached", 7), ("objects walked", 15), ("pause p50", 10), ("max", 8)
    print("  " + " ".join(f"{name:>{width}}" for name, width in columns) + f" {'RSS':>8}")
    runs: dict[str, list[list[dict[str, float]]]] = {heap: [] for heap in HEAPS}
    for pair in range(pairs):
        # Which goes first alternates too, so neither always has the quieter start.
        for heap in HEAPS if pair % 2 == 0 else HEAPS[::-1]:
            runs[heap].append(await run_in_child(cached, heap))
    print("the pause at each N, median over the runs (spread), frozen against scanned:")
    for step, target in enumerate(cached):
        p50 = {heap: [run[step]["p50"] for run in runs[heap]] for heap in HEAPS}
        frozen, scanned = (statistics.median(p50[heap]) for heap in HEAPS)
        print(
            f"  {target:>7,} cached: frozen {frozen:.3f} s ({min(p50['frozen']):.3f}-"
            f"{max(p50['frozen']):.3f}), scanned {scanned:.3f} s ({min(p50['scanned']):.3f}-"
            f"{max(p50['scanned']):.3f}): {frozen / scanned:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cached", type=int, nargs="+", default=[500, 1000, 2000, 3000])
    parser.add_argument("--pairs", type=int, default=2, help="runs of each heap, alternating")
    parser.add_argument("--heap", choices=HEAPS, help="one run in this process (the comparison's)")
    args = parser.parse_args()
    cached = sorted(args.cached)
    run_benchmark(one_run(cached, args.heap) if args.heap else main(cached, args.pairs))

"""What a full garbage collection past 2 s does to a workflow task in flight.

    N scattered objects beside an in-process Worker (a heap that takes seconds to walk)
      -> conversations opened one after another, while the loop makes a full collection every
         0.3 s -> each pause said by worker.gc_pauses; each activation the SDK failed as
         deadlocked ("[TMPRL1101] Potential deadlock detected", "Failed handling activation")

The SDK gives an activation 2 s of wall time, and a full collection holds the interpreter, the
activation's thread and the event loop both, for as long as it walks the heap. Whether a pause
fails the activation it caught depends on which runs first after it: the activation's last
step, or the loop's check of its clock. The objects here stand in for a Worker's cached
conversations (bench.gc_pause: about 420 each), scattered in memory as a long-lived heap is.

    .venv/bin/python -m bench.gc_deadlock [--objects 10000000] [--conversations 300]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import logging
import random
import tempfile
import time
import uuid
from pathlib import Path

from agent.settings import AgentSettings
from bench import run_benchmark
from bench.open_recovery import answered_after, open_one
from bench.warnings import pauses_in
from harness.conditions import wait_for
from harness.crowd import place_crowd
from harness.dev_server import start_dev_server
from refund_bot.wiring import local_thread_store
from worker.gc_pauses import watching_gc_pauses
from worker.runner import build_worker, prepare_stores
from worker.telemetry import metric_meter

COLLECT_EVERY = 0.3  # seconds between the end of one full collection and the next
DEADLOCK = "TMPRL1101"


class _Kept(logging.Handler):
    """Every log record of this process, kept to be counted."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _heap(objects: int) -> list[dict[str, object]]:
    """`objects` tracked containers pointing at random others: a dict and a list a node."""
    heap: list[dict[str, object]] = [{} for _ in range(objects // 2)]
    for node in heap:
        node["to"] = heap[random.randrange(len(heap))]
        node["and"] = [heap[random.randrange(len(heap))]]
    return heap


async def _collecting(stop: asyncio.Event) -> None:
    while not stop.is_set():
        await asyncio.sleep(COLLECT_EVERY)
        gc.collect()


async def main(objects: int, conversations: int) -> None:
    kept = _Kept()
    logging.getLogger().addHandler(kept)
    logging.getLogger().setLevel(logging.INFO)
    heap = _heap(objects)
    started = time.perf_counter()
    gc.collect()
    print(f"{objects:,} objects beside the Worker: a full collection takes "
          f"{time.perf_counter() - started:.2f} s", flush=True)  # fmt: skip
    env = await start_dev_server()
    with tempfile.TemporaryDirectory() as tmp:
        settings = AgentSettings(_env_file=None, data_dir=Path(tmp))
        await prepare_stores(settings)
        threads = local_thread_store(settings)
        queue = f"gc-{uuid.uuid4().hex[:8]}"
        worker = await build_worker(env.client, queue, settings, {"local": threads})
        async with env, worker, watching_gc_pauses(metric_meter(), len(heap)):
            shoppers = await place_crowd(settings, conversations, prefix="gcd-", first_order=1)
            stop = asyncio.Event()
            collecting = asyncio.create_task(_collecting(stop))
            handles = [await open_one(env.client, threads, s, "gcd", queue) for s in shoppers]
            for handle in handles:
                await wait_for(functools.partial(answered_after, handle, 0), timeout=600)
            stop.set()
            await collecting
    del heap
    pauses = pauses_in("\n".join(r.getMessage() for r in kept.records))
    failed = [r for r in kept.records if r.exc_info and DEADLOCK in str(r.exc_info[1])]
    print(
        f"{conversations} conversations opened, each asked its first question; full collections "
        f"said by the Worker: {len(pauses)} ({min(pauses, default=0):.2f}-"
        f"{max(pauses, default=0):.2f} s, {sum(p >= 2 for p in pauses)} of 2 s or more); "
        f"activations failed as deadlocked ({DEADLOCK}): {len(failed)}",
        flush=True,
    )
    for record in failed[:3]:
        print(f"  {record.getMessage()}: {record.exc_info and record.exc_info[1]}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000_000)
    parser.add_argument("--conversations", type=int, default=300)
    args = parser.parse_args()
    run_benchmark(main(args.objects, args.conversations))

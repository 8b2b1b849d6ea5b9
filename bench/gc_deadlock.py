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
import time

from bench import run_benchmark
from bench.open_recovery import all_asked, open_one
from bench.warnings import pauses_in, pauses_said
from harness.conditions import wait_for
from harness.crowd import place_crowd
from harness.inproc import standalone_agent
from worker.gc_pauses import watching_gc_pauses
from worker.settings import DEFAULT_CACHED_CONVERSATIONS
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
    async with (
        standalone_agent() as agent,
        watching_gc_pauses(metric_meter(), DEFAULT_CACHED_CONVERSATIONS),
    ):
        shoppers = await place_crowd(agent.settings, conversations, prefix="gcd-", first_order=1)
        stop = asyncio.Event()
        collecting = asyncio.create_task(_collecting(stop))
        handles = [
            await open_one(agent.client, agent.threads, shopper, "gcd", agent.task_queue)
            for shopper in shoppers
        ]
        await wait_for(functools.partial(all_asked, handles), timeout=600, what="every question")
        stop.set()
        await collecting
    del heap
    pauses = pauses_in("\n".join(r.getMessage() for r in kept.records))
    failed = [r for r in kept.records if r.exc_info and DEADLOCK in str(r.exc_info[1])]
    print(
        f"{conversations} conversations opened, each asked its first question; full collections "
        f"said by the Worker: {pauses_said(pauses)}; activations failed as deadlocked "
        f"({DEADLOCK}): {len(failed)}",
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

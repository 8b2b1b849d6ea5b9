"""What a store call costs on SQLite: a connection per call against one kept open and reused.

    LocalThreadStore.post (one INSERT in a transaction, what post_to_thread does)
      -> SqliteDatabase(idle_connections=0): aiosqlite connects (a thread, a file open) each call
      -> SqliteDatabase() (refund-bot's default): an idle connection, handed back after the call

The two run interleaved, a call each in turn, in one process on one data directory, so both see
the same machine and the same file growing; each call is timed in wall time and in CPU time.

    .venv/bin/python -m bench.sqlite_calls [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from agent.models import MessageKey, OutboundMessage, ThreadRef
from agent.stores.sqlite import SqliteDatabase
from bench import percentile, run_benchmark
from bot.local.thread_store import LocalThreadStore


def _message(seq: int) -> OutboundMessage:
    return OutboundMessage(
        thread=ThreadRef(platform="local", workspace="local", channel="support", thread="bench"),
        key=MessageKey(workflow_id="bench", run_id=uuid.uuid4().hex, seq=seq),
        kind="question",
        text="Was the package opened?",
    )


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stores = {
            "a connection per call": LocalThreadStore(
                SqliteDatabase(Path(tmp), idle_connections=0)
            ),
            "connections reused": LocalThreadStore(SqliteDatabase(Path(tmp))),
        }
        wall: dict[str, list[float]] = {name: [] for name in stores}
        cpu: dict[str, list[float]] = {name: [] for name in stores}
        for store in stores.values():  # migrated and warm before the clock
            await store.post(_message(0))
        for seq in range(1, calls + 1):
            for name, store in stores.items():
                started, started_cpu = time.perf_counter(), time.process_time()
                await store.post(_message(seq))
                wall[name].append((time.perf_counter() - started) * 1000)
                cpu[name].append((time.process_time() - started_cpu) * 1000)
        for store in stores.values():
            await store.database.close()
    print(f"LocalThreadStore.post, {calls} calls each, interleaved (milliseconds):")
    for name in stores:
        print(
            f"  {name:<22} wall p50 {statistics.median(wall[name]):6.3f}  "
            f"p99 {percentile(wall[name], 99):6.3f}   "
            f"CPU (this process, all threads) mean {statistics.fmean(cpu[name]):6.3f}"
        )
    per_call, reused = (statistics.median(wall[n]) for n in stores)
    print(f"  reused / per call, wall p50: {reused / per_call:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    run_benchmark(main(parser.parse_args().calls))

"""A Worker's full garbage collections: what its start made left out of them, each one measured
into its histogram, the long ones said.

    freeze_startup_heap -> what exists now is walked by no later collection
    gc.collect() (a full collection, as the interpreter makes one when its heap has grown)
      -> watching_gc_pauses -> refund_bot_worker_gc_pause_seconds on the exporter; a log line

What a pause risks (the SDK's deadlock timeout) and how it grows: worker/gc_pauses.py.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import uuid
import weakref

import pytest
from temporalio.client import Client

from agent.settings import AgentSettings, TemporalSettings
from agent.stores.databases import database_for
from bot.local.thread_store import LocalThreadStore
from harness import free_port
from harness.conditions import wait_for
from harness.metrics import scrape, total
from worker import gc_pauses
from worker.gc_pauses import PAUSE_METRIC, freeze_startup_heap, said, watching_gc_pauses
from worker.runner import run_worker
from worker.telemetry import prometheus_runtime

LOGGER = "worker.gc_pauses"


def _full_collections() -> int:
    return gc.get_stats()[2]["collections"]


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only a collection frees it


def test_what_the_start_left_is_walked_by_no_later_collection_and_its_garbage_is_freed() -> None:
    started: list[list[int]] = [[]]  # tracked by the collector, as the start's schemas are
    garbage = _Node()
    gone = weakref.ref(garbage)
    del garbage  # unreachable, but a cycle: freed by the collection made before freezing
    try:
        frozen = freeze_startup_heap()
        later: list[list[int]] = [[]]
        walked = {id(o) for o in gc.get_objects()}  # what a full collection walks
        # Other threads may free frozen objects meanwhile (freed as usual when unreferenced).
        assert frozen > 0 and gc.get_freeze_count() > 0
        assert id(started) not in walked and id(later) in walked
        assert gone() is None
    finally:
        gc.unfreeze()  # this test process goes on as it was


async def test_each_full_collection_is_recorded_in_the_histogram_and_young_ones_are_not() -> None:
    exporter = f"127.0.0.1:{free_port()}"
    runtime = prometheus_runtime(exporter)
    before = _full_collections()
    started = time.perf_counter()
    async with watching_gc_pauses(runtime.metric_meter, 1000, every=0.05):
        for _ in range(50):  # young collections: frequent and short, not what this measures
            gc.collect(0)
            gc.collect(1)
        gc.collect()  # one full collection
        full = _full_collections() - before

        async def recorded() -> str | None:
            text = await scrape(f"http://{exporter}/metrics")
            return text if f"{PAUSE_METRIC}_count{{" in text else None

        text = await wait_for(recorded, timeout=10, what="the pause exported")
    took = time.perf_counter() - started
    count = total(text, f"{PAUSE_METRIC}_count")
    # The one made here, and any the interpreter made on its own meanwhile; never the 100 young.
    assert 1 <= count <= full <= 3, (count, full)
    assert 0 < total(text, f"{PAUSE_METRIC}_sum") < took
    # The buckets reach past the SDK's deadlock timeout, so a dashboard sees a pause near it.
    assert total(text, f"{PAUSE_METRIC}_bucket", le="2") == count


def test_a_pause_is_said_by_what_it_risks() -> None:
    assert said(0.05, 1000) is None
    level, line = said(0.31, 1000) or (0, "")
    assert level == logging.INFO
    assert line == (
        "a full garbage collection held this Worker 0.31 s (its cache holds up to 1000 "
        "conversations)"
    )
    level, line = said(1.2, 3000) or (0, "")
    assert level == logging.WARNING
    assert "1.20 s, more than half of the SDK's 2 s deadlock timeout" in line
    assert "WORKER_CACHED_CONVERSATIONS=3000" in line and "REFUND_BOT_WORKERS" in line
    level, line = said(2.35, 10000) or (0, "")
    assert level == logging.WARNING and "2.35 s, past the SDK's 2 s deadlock timeout" in line


async def test_the_collector_is_left_as_it_was_when_the_watch_ends_even_on_an_error() -> None:
    callbacks = list(gc.callbacks)
    with pytest.raises(RuntimeError, match="the Worker stopped"):
        async with watching_gc_pauses(
            prometheus_runtime(f"127.0.0.1:{free_port()}").metric_meter, 10
        ):
            assert len(gc.callbacks) == len(callbacks) + 1
            raise RuntimeError("the Worker stopped")
    assert gc.callbacks == callbacks


async def test_a_polling_worker_says_its_long_pauses(
    client: Client,
    agent_settings: AgentSettings,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Any pause is "long" here: a full collection of a test process takes milliseconds.
    monkeypatch.setattr(gc_pauses, "NOTED", 0.0)
    monkeypatch.setattr(gc_pauses, "WARNED", 0.0)
    caplog.set_level(logging.INFO)
    threads = LocalThreadStore(database_for(agent_settings))
    temporal = TemporalSettings(_env_file=None, task_queue=f"q-{uuid.uuid4().hex[:8]}")
    worker = asyncio.create_task(
        run_worker(client, temporal, agent_settings, {"local": threads}, cached_conversations=77)
    )

    def lines(logger: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == logger]

    try:
        await wait_for(
            lambda: any("polling" in r.getMessage() for r in lines("worker.runner")),
            what="the Worker polling",
        )
        gc.collect()
        [warning, *_] = await wait_for(lambda: lines(LOGGER), what="the pause said")
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert warning.levelno == logging.WARNING
    assert warning.getMessage().startswith("a full garbage collection held this Worker ")
    assert "WORKER_CACHED_CONVERSATIONS=77" in warning.getMessage()

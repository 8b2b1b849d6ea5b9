"""SQLite connections kept idle between calls: reused, and harmless when nobody closes them.

Database.connect -> a call -> the connection back to the idle ones -> the next call reuses it
a Database nobody closed, collected anywhere -> its idle connections close, their threads end
"""

from __future__ import annotations

import asyncio
import gc
import threading
from pathlib import Path
from typing import Any

from agent.stores.grants import GrantStore
from agent.stores.sqlite import SqliteDatabase


def _connection_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "_connection_worker_thread" in t.name}


async def test_calls_reuse_one_idle_connection(tmp_path: Path) -> None:
    database = SqliteDatabase(tmp_path)
    grants = GrantStore(database)
    before = _connection_threads()
    for _ in range(5):
        await grants.seed()
    # The migration's connection closed; the calls, one after another, shared one.
    assert len(_connection_threads() - before) == 1
    await database.close()
    assert not any(t.is_alive() for t in _connection_threads() - before)


class _WorkflowLikeLoop(asyncio.AbstractEventLoop):
    """An event loop another thread cannot call, as a Temporal workflow's is: the loop a garbage
    collection inside a workflow activation finds."""

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def get_debug(self) -> bool:
        return False


async def test_an_idle_connection_collected_anywhere_closes_quietly(tmp_path: Path) -> None:
    before = _connection_threads()
    database = SqliteDatabase(tmp_path)
    await GrantStore(database).seed()
    idle = _connection_threads() - before
    assert len(idle) == 1

    failures: list[threading.ExceptHookArgs] = []
    hook, threading.excepthook = threading.excepthook, failures.append
    try:
        held = [database]
        del database  # the last reference is dropped in the collecting thread

        def collect() -> None:
            asyncio.set_event_loop(_WorkflowLikeLoop())
            held.clear()
            gc.collect()

        collector = threading.Thread(target=collect)
        collector.start()
        collector.join()
        for thread in idle:
            thread.join(timeout=5)
    finally:
        threading.excepthook = hook
    assert not any(t.is_alive() for t in idle)
    assert failures == []

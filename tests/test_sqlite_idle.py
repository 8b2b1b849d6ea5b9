"""SQLite connections kept idle between calls: reused, and harmless when nobody closes them.

Database.connect -> a call -> the connection back to the idle ones -> the next call reuses it
a Database nobody closed, collected anywhere -> its idle connections close, their threads end
a process that exits without closing it -> exits (the connections' threads are daemons)
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from agent.stores import sqlite as sqlite_backend
from agent.stores.grants import GrantStore
from agent.stores.sqlite import SqliteDatabase
from harness.conditions import wait_for


def _connection_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "_connection_worker_thread" in t.name}


async def test_calls_reuse_one_idle_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[Path] = []
    real_open = sqlite_backend._open

    async def counted_open(path: Path) -> Any:
        opened.append(path)
        return await real_open(path)

    monkeypatch.setattr(sqlite_backend, "_open", counted_open)
    before = _connection_threads()
    database = SqliteDatabase(tmp_path)
    grants = GrantStore(database)
    for _ in range(5):
        await grants.seed()
    # One connection for the migration (closed), one for every call after it.
    assert len(opened) == 2
    pooled = await _the_one_idle_connection(before)
    await database.close()
    await wait_for(lambda: not pooled.is_alive(), timeout=5, what="the idle connection closed")


async def _the_one_idle_connection(before: set[threading.Thread]) -> threading.Thread:
    """The connection thread a Database left idle (the migration's may still be ending)."""
    await wait_for(
        lambda: len(_connection_threads() - before) == 1, timeout=5, what="one idle connection"
    )
    [idle] = _connection_threads() - before
    return idle


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
    idle = await _the_one_idle_connection(before)

    failures: list[threading.ExceptHookArgs] = []
    hook, threading.excepthook = threading.excepthook, failures.append
    try:
        held = [database]
        del database  # the last reference is dropped in the collecting thread

        def collect() -> None:
            # typeshed marks AbstractEventLoop's methods abstract; at run time it is no ABC, and
            # each method this loop leaves out raises NotImplementedError, as meant here.
            asyncio.set_event_loop(_WorkflowLikeLoop())  # type: ignore[abstract]
            held.clear()
            gc.collect()

        collector = threading.Thread(target=collect)
        collector.start()
        collector.join()
        idle.join(timeout=5)
    finally:
        threading.excepthook = hook
    assert not idle.is_alive()
    assert failures == []


def test_a_process_that_never_closes_its_database_exits(tmp_path: Path) -> None:
    code = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from agent.stores.grants import GrantStore\n"
        "from agent.stores.sqlite import SqliteDatabase\n"
        "database = SqliteDatabase(Path(sys.argv[1]))\n"
        "asyncio.run(GrantStore(database).seed())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stderr) == (0, "")

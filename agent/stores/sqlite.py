"""The SQLite backend: one file per store in a directory, each opened through aiosqlite.

    Database.connect(schema) -> an idle connection to <directory>/<schema.sqlite_file>, or a new
        one (WAL, busy timeout) -> Connection -> back to the idle ones (or closed, after an error)

One file per store, as before DATABASE_URL existed, so a data directory from then is read in place,
and a write to one store (the inbox, say) never waits for another's (the ledger's): SQLite lets
one writer at a time into a file. WAL lets the bot, the terminal and the Worker read while another
process writes; the busy timeout makes a writer wait for the lock instead of failing at once.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from agent.stores.database import (
    SQLITE,
    Connection,
    DatabaseRefused,
    DatabaseUnavailable,
    Row,
    Schema,
    apply_migrations,
    traced,
)
from agent.stores.urls import sqlite_url

# How long a writer waits for another process's write lock before failing.
BUSY_TIMEOUT_S = 10.0

# Connections kept open per file between calls. A new aiosqlite connection is a thread and a file
# open, several times the cost of the call itself (bench.sqlite_calls; docs/benchmarks.md,
# "Stores"), and every lookup, grant read, post and inbox write used to pay it. More calls at
# once than this open extra connections, closed when they end.
IDLE_CONNECTIONS = 4

# What SQLite says of a table or column that is not there (an OperationalError, like "database is
# locked" or "unable to open database file", which are outages to wait out).
_SCHEMA_MISSING = ("no such table", "no such column", "has no column named")


def refusal(err: sqlite3.Error, url: str) -> DatabaseRefused | None:
    """The permanent errors among SQLite's: a constraint refused the write, or the schema lacks a
    table or column. None for the rest (locked, busy, cannot open): Temporal retries those."""
    if isinstance(err, sqlite3.IntegrityError):
        return DatabaseRefused(url, "refused the write", err)
    if isinstance(err, sqlite3.OperationalError) and any(m in str(err) for m in _SCHEMA_MISSING):
        return DatabaseRefused(url, "lacks what this code reads", err)
    return None


@contextmanager
def sorted_errors(url: str) -> Iterator[None]:
    """SQLite's permanent errors raised as DatabaseRefused; an outage's as they are."""
    try:
        yield
    except sqlite3.Error as err:
        if (refused := refusal(err, url)) is not None:
            raise refused from err
        raise


class SqliteConnection:
    dialect = SQLITE

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    # Every statement's cursor is closed before the call returns (execute_fetchall drops it): the
    # connection goes back to the idle ones, and an open statement would keep its read lock.
    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        return list(await self._db.execute_fetchall(sql, args))

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        rows = await self.fetch(sql, *args)  # all of them: a RETURNING write completes
        return rows[0] if rows else None

    async def fetchval(self, sql: str, *args: Any) -> Any:
        row = await self.fetchrow(sql, *args)
        return None if row is None else row[0]

    async def execute(self, sql: str, *args: Any) -> int:
        async with self._db.execute(sql, args) as cursor:
            return max(cursor.rowcount, 0)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        async with self._db.executemany(sql, rows):
            pass

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        await self.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            await self._db.rollback()
            raise
        await self._db.commit()


class SqliteDatabase:
    dialect = SQLITE

    def __init__(self, directory: Path, *, idle_connections: int = IDLE_CONNECTIONS) -> None:
        self.directory = directory
        self.idle_connections = idle_connections  # 0: a connection per call (bench.sqlite_calls)
        self.url = sqlite_url(directory)
        # Stores this object has migrated: the check runs once per store, not on every call.
        self._ready: set[str] = set()
        self._migrating: dict[str, asyncio.Lock] = {}
        self._idle: dict[Path, list[aiosqlite.Connection]] = {}

    def path(self, schema: Schema) -> Path:
        return self.directory / schema.sqlite_file

    @asynccontextmanager
    async def connect(self, schema: Schema) -> AsyncIterator[Connection]:
        if schema.name not in self._ready:
            await self.migrate(schema)
        path = self.path(schema)
        idle = self._idle.setdefault(path, [])
        with sorted_errors(self.url):
            db = idle.pop() if idle else await _open(path)
        reusable = False
        try:
            with sorted_errors(self.url):
                yield traced(SqliteConnection(db), schema)
            reusable = not db.in_transaction
        finally:
            # After an error or a cancellation the connection may be mid-statement: closed, not
            # handed to the next caller.
            if reusable and len(idle) < self.idle_connections:
                idle.append(db)
            else:
                await db.close()

    async def migrate(self, *schemas: Schema) -> None:
        for schema in schemas:
            async with self._migrating.setdefault(schema.name, asyncio.Lock()):
                if schema.name in self._ready:
                    continue
                try:
                    self.directory.mkdir(parents=True, exist_ok=True)
                except OSError as err:
                    raise DatabaseUnavailable(
                        f"cannot create the SQLite directory {self.directory} "
                        f"(DATABASE_URL={self.url}): {err.strerror or err}"
                    ) from err
                db = await _open(self.path(schema))
                try:
                    await _use_wal(db)
                    # An exclusive transaction: a second process migrating the same file waits
                    # here (busy timeout), then finds every version recorded.
                    await _until_unlocked(db, "BEGIN EXCLUSIVE")
                    try:
                        await apply_migrations(SqliteConnection(db), schema)
                    except BaseException:
                        await db.rollback()
                        raise
                    await db.commit()
                finally:
                    await db.close()
                self._ready.add(schema.name)

    @asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[bool]:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True  # the kernel drops the lock when the fd closes, or the process dies
        finally:
            os.close(fd)

    async def close(self) -> None:
        """Close the idle connections (one in use is closed when its call ends)."""
        for db in self._take_idle():
            await db.close()

    def _take_idle(self) -> list[aiosqlite.Connection]:
        idle = [db for connections in self._idle.values() for db in connections]
        self._idle.clear()
        return idle

    def __del__(self) -> None:
        # Collected with connections idle (nobody closed it), on whichever thread collects.
        # At interpreter exit a new thread never starts (and the idle ones are daemons).
        idle = self._take_idle()
        if idle and not sys.is_finalizing():
            threading.Thread(target=_stop, args=(idle,), daemon=True).start()


async def _open(path: Path) -> aiosqlite.Connection:
    # isolation_level=None: autocommit, and transactions only where a store opens one.
    db = await _in_a_daemon_thread(
        lambda: aiosqlite.connect(
            path, iter_chunk_size=64, timeout=BUSY_TIMEOUT_S, isolation_level=None
        )
    )
    db.row_factory = aiosqlite.Row
    return db


def _in_a_daemon_thread(make: Callable[[], aiosqlite.Connection]) -> aiosqlite.Connection:
    """`make()` run in a daemon thread. aiosqlite gives each connection a thread, which inherits
    its creator's daemon flag (threading's documented rule): made there, an idle connection of a
    Database nobody closed (a test's, a process that exits on its return) does not hold the
    interpreter at exit. Committed data is safe without the close: SQLite's WAL is read back."""
    made: list[aiosqlite.Connection] = []
    maker = threading.Thread(target=lambda: made.append(make()), daemon=True)
    maker.start()
    maker.join()
    return made[0]


def _stop(connections: list[aiosqlite.Connection]) -> None:
    """Stop idle connections' threads from a thread without an event loop: aiosqlite's stop()
    then hands its thread no future to complete (a Temporal workflow's loop, which a garbage
    collection inside a workflow activation finds, refuses other threads' calls)."""
    for db in connections:
        db.stop()


async def _use_wal(db: aiosqlite.Connection) -> None:
    """Switch the file to WAL (persistent: a no-op once done). Two processes creating one file at
    the same moment both try it, and the loser is told "locked" at once (SQLite's busy timeout does
    not cover this switch): it tries again until the deadline."""
    await _until_unlocked(db, "PRAGMA journal_mode=WAL")


async def _until_unlocked(db: aiosqlite.Connection, sql: str) -> None:
    """Run `sql`, again while SQLite answers "locked" at once, until BUSY_TIMEOUT_S: some locks
    (a journal-mode switch or WAL recovery in another connection of a new file) are reported
    without SQLite's busy handler waiting for them."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            # Closed at once: `PRAGMA journal_mode` answers a row, and its statement left open
            # keeps a read lock that a writer on another connection waits for while this one
            # waits for it (a deadlock until the busy timeout, seen as "database is locked").
            cursor = await db.execute(sql)
            await cursor.close()
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.05)

"""The stores' database: one DATABASE_URL, SQLite (the embedded default) or PostgreSQL.

    a store (grants, ledger, …) -> Database.connect(schema) -> migrated once -> Connection (SQL, ?)
        sqlite:///<directory>   SqliteDatabase: one file per store in the directory (aiosqlite)
        postgresql://…          PostgresDatabase: one database for every store, a pool (asyncpg)

Every store is one class per fact (agent/stores/grants.py, ledger.py, domain.py; bot/inbox.py,
hold.py, local/thread_store.py) whose SQL is written once, with `?` placeholders, against the
`Connection` below. What the two dialects force apart lives in `Dialect` (a row lock, a digits
test) and in each store's migrations (column types, identity columns); nothing else is copied.

Schemas are versioned (`Migration`), recorded in a `schema_migrations` table and applied at
start-up, or the first time a process opens a store, under a lock that makes several processes
starting at once safe: an exclusive transaction on SQLite, an advisory lock on PostgreSQL.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from temporalio.exceptions import ApplicationError

from agent import tracing

log = logging.getLogger(__name__)


class Row(Protocol):
    """A result row, read by column name or by position: a sqlite3.Row or an asyncpg.Record.
    Not a Mapping: iterating either gives the values, not the names."""

    def keys(self) -> Iterable[str]: ...

    def __getitem__(self, key: str | int, /) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...


class DatabaseUnavailable(Exception):
    """The database at DATABASE_URL cannot be reached or opened; the message is one line. An
    outage: an Activity that meets it is retried (a conversation waits it out)."""


class DatabaseRefused(ApplicationError):
    """The database answered, and no retry can change its answer: a wrong password, a database,
    table or column that is not there, a write a constraint refuses. Non-retryable: the step
    fails at once and the customer hears one plain sentence; this line (DATABASE_URL shown
    without its password, never a row's values) is for the log and Event History."""

    def __init__(self, url: str, what: str, err: BaseException) -> None:
        super().__init__(
            f"the database at DATABASE_URL={url} {what}: {first_line(err)}",
            type="DatabaseRefused",
            non_retryable=True,
        )


def first_line(err: BaseException) -> str:
    """A driver's message, its first line only (PostgreSQL's detail lines can hold row values)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


# ------------------------------------------------------------------------------------------------
# What the dialects force apart
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dialect:
    name: Literal["sqlite", "postgresql"]
    # Appended to a SELECT that reads a row the transaction goes on to decide by. PostgreSQL locks
    # that row only, so writers of other rows never wait; SQLite's write transaction (BEGIN
    # IMMEDIATE) already holds the whole file, so it needs nothing.
    for_update: str
    # A condition: `expr` is one or more ASCII digits and nothing else.
    digits: Callable[[str], str]
    # Run first in a transaction that appends to a log its readers tail by id ("every row past the
    # last one I saw"), with the log's lock key. PostgreSQL takes an identity value at the insert
    # and commits it whenever: a reader could read a higher id, then pass over a lower one
    # committed after it. This waits for the previous appender's commit, so ids commit in order.
    # SQLite's write transaction (BEGIN IMMEDIATE) already holds the whole file: nothing to run.
    append_in_order: str | None


SQLITE = Dialect(
    name="sqlite",
    for_update="",
    digits=lambda expr: f"({expr} GLOB '[0-9]*' AND {expr} NOT GLOB '*[^0-9]*')",
    append_in_order=None,
)
POSTGRESQL = Dialect(
    name="postgresql",
    for_update=" FOR UPDATE",
    digits=lambda expr: f"({expr} ~ '^[0-9]+$')",
    append_in_order="SELECT pg_advisory_xact_lock(?)",
)


# ------------------------------------------------------------------------------------------------
# What a store talks to
# ------------------------------------------------------------------------------------------------


class Connection(Protocol):
    """One connection, in autocommit unless inside `transaction()`. SQL uses `?` placeholders."""

    dialect: Dialect

    async def fetch(self, sql: str, *args: Any) -> list[Row]: ...

    async def fetchrow(self, sql: str, *args: Any) -> Row | None: ...

    async def fetchval(self, sql: str, *args: Any) -> Any: ...

    async def execute(self, sql: str, *args: Any) -> int:
        """Run one statement; returns how many rows it changed."""
        ...

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def transaction(self) -> AbstractAsyncContextManager[None]:
        """A write transaction: committed at the end of the block, rolled back by an exception.

        SQLite takes the file's write lock at once (BEGIN IMMEDIATE): one writer at a time per
        store. PostgreSQL runs READ COMMITTED: writers meet only on the rows they lock
        (`dialect.for_update`) or the unique keys they insert.
        """
        ...


class Database(Protocol):
    """Where every store lives. `open_database(url)` gives the one for a URL."""

    dialect: Dialect
    url: str  # as shown to people: never a password

    def connect(self, schema: Schema) -> AbstractAsyncContextManager[Connection]:
        """A connection to `schema`'s store, migrated first if this object has not yet done so."""
        ...

    async def migrate(self, *schemas: Schema) -> None:
        """Bring each store's schema up to date (idempotent; safe from several processes)."""
        ...

    def exclusive(self, name: str) -> AbstractAsyncContextManager[bool]:
        """Hold the lock `name` while the block runs, if nobody else does: yields whether this
        process holds it. It is released when the block ends or the process dies, however.
        SQLite: a flock on `<directory>/<name>.lock` (one host); PostgreSQL: a session advisory
        lock (every host on the database)."""
        ...

    async def close(self) -> None: ...


class TracedConnection:
    """A Connection whose every statement is a span, `<operation> <store>` ("SELECT grants"),
    with OpenTelemetry's database attributes: the system, the operation, the store. Never the
    statement's arguments (customer data) and not its text. Only while tracing is on: `traced`
    hands out the bare connection otherwise, so the stores pay nothing for it."""

    def __init__(self, conn: Connection, store: str) -> None:
        self._conn = conn
        self._store = store
        self.dialect = conn.dialect

    def _span(self, sql: str) -> AbstractContextManager[tracing.Span]:
        operation = (sql.split(None, 1) or ["?"])[0].upper()
        return tracing.span(
            f"{operation} {self._store}",
            "client",
            db_system=self.dialect.name,
            db_operation=operation,
            db_namespace=self._store,
        )

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        with self._span(sql):
            return await self._conn.fetch(sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        with self._span(sql):
            return await self._conn.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        with self._span(sql):
            return await self._conn.fetchval(sql, *args)

    async def execute(self, sql: str, *args: Any) -> int:
        with self._span(sql):
            return await self._conn.execute(sql, *args)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._span(sql):
            await self._conn.executemany(sql, rows)

    def transaction(self) -> AbstractAsyncContextManager[None]:
        return self._conn.transaction()


def traced(conn: Connection, schema: Schema) -> Connection:
    """`conn`, its statements spans while tracing is on (the backends' `connect` call this)."""
    return TracedConnection(conn, schema.name) if tracing.enabled() else conn


# ------------------------------------------------------------------------------------------------
# Versioned schemas
# ------------------------------------------------------------------------------------------------

# A migration step: one SQL statement, or a function for what SQL alone cannot say.
Step = str | Callable[[Connection], Awaitable[None]]


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sqlite: tuple[Step, ...]
    postgresql: tuple[Step, ...]

    def steps(self, dialect: Dialect) -> tuple[Step, ...]:
        return self.sqlite if dialect.name == "sqlite" else self.postgresql


def both(version: int, name: str, *steps: Step) -> Migration:
    """A migration whose statements read the same in both dialects."""
    return Migration(version, name, steps, steps)


@dataclass(frozen=True)
class Schema:
    """One store's tables: its name, its SQLite file, and its migrations, oldest first.

    Migration 1 of each store is the schema it had before migrations existed (with IF NOT EXISTS),
    so a data directory from then is adopted as version 1 with its data. A released migration is
    never edited: a change is a new version.
    """

    name: str
    sqlite_file: str
    migrations: tuple[Migration, ...] = field(default=())

    def __post_init__(self) -> None:
        versions = [m.version for m in self.migrations]
        if versions != list(range(1, len(versions) + 1)):
            raise ValueError(f"{self.name}: migrations must be numbered 1, 2, 3, …: {versions}")

    @property
    def version(self) -> int:
        return len(self.migrations)


MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    store TEXT NOT NULL,
    version INTEGER NOT NULL,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL,
    PRIMARY KEY (store, version)
)
"""


async def apply_migrations(conn: Connection, schema: Schema) -> list[int]:
    """Apply `schema`'s pending migrations; returns the versions applied.

    The caller holds the backend's migration lock, inside one transaction: another process
    migrating at the same moment waits, then finds nothing left to do.
    """
    await conn.execute(MIGRATIONS_TABLE)
    applied = {
        int(row["version"])
        for row in await conn.fetch(
            "SELECT version FROM schema_migrations WHERE store = ?", schema.name
        )
    }
    newer = sorted(v for v in applied if v > schema.version)
    if newer:
        # Written by a newer refund-bot. Migrations only add, so this one still works; say so
        # once, so a half-finished upgrade is visible.
        log.warning(
            "The %s store is at schema version %d, newer than this refund-bot knows (%d): "
            "upgrade this process too",
            schema.name, newer[-1], schema.version,
        )  # fmt: skip
    done = []
    for migration in schema.migrations:
        if migration.version in applied:
            continue
        for step in migration.steps(conn.dialect):
            if isinstance(step, str):
                await conn.execute(step)
            else:
                await step(conn)
        await conn.execute(
            "INSERT INTO schema_migrations (store, version, name, applied_at) VALUES (?, ?, ?, ?)",
            schema.name,
            migration.version,
            migration.name,
            datetime.now(UTC).isoformat(timespec="seconds"),
        )
        done.append(migration.version)
    if done:
        log.info("%s store: applied schema migration(s) %s", schema.name, done)
    return done


def lock_key(name: str) -> int:
    """A stable signed 64-bit number for a lock's name (PostgreSQL advisory locks take one)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


# ------------------------------------------------------------------------------------------------
# DATABASE_URL
# ------------------------------------------------------------------------------------------------

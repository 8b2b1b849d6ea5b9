"""The PostgreSQL backend: every store in one database, reached through an asyncpg pool.

    Database.connect(schema) -> pool.acquire() -> Connection (`?` -> `$1, $2, …`)
    Database.migrate(schemas) -> one transaction per store under pg_advisory_xact_lock

Every host that sets the same DATABASE_URL reads one answer to every fact. Transactions run READ
COMMITTED: a writer waits only for the rows it locks (`SELECT … FOR UPDATE`) or a unique key
another transaction is inserting, never for a table, so two Workers refunding different
conversations never wait for each other.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from asyncpg import exceptions as pg

from agent.stores.database import (
    POSTGRESQL,
    Connection,
    DatabaseRefused,
    DatabaseUnavailable,
    Row,
    Schema,
    apply_migrations,
    first_line,
    lock_key,
    traced,
)
from agent.stores.urls import shown

# Connections per process. A Worker runs many Activities at once, but each holds a connection
# only for a few statements.
POOL_SIZE = 10
# An idle connection is closed after this long, so a quiet process holds none.
IDLE_LIFETIME_S = 30.0
CONNECT_TIMEOUT_S = 10.0
# The lock every process takes to migrate, whichever store: migrations are rare and short.
MIGRATION_LOCK = lock_key("refund-bot schema migrations")

# What the database answers that no retry changes, by what it means. Everything else is an outage
# Temporal retries: the server unreachable or restarting (OSError, TimeoutError,
# ConnectionDoesNotExistError, CannotConnectNowError, TooManyConnectionsError, any
# PostgresConnectionError), a statement cancelled, a serialization failure.
_REFUSALS: tuple[tuple[type[Exception], str], ...] = (
    # InvalidPasswordError is one of these.
    (pg.InvalidAuthorizationSpecificationError, "refused refund-bot's login"),
    (pg.InvalidCatalogNameError, "does not exist"),
    (pg.UndefinedTableError, "lacks what this code reads"),
    (pg.UndefinedColumnError, "lacks what this code reads"),
    (pg.IntegrityConstraintViolationError, "refused the write"),
)


def refusal(err: BaseException, url: str) -> DatabaseRefused | None:
    """The permanent errors among PostgreSQL's; None for an outage (Temporal retries it)."""
    for kind, what in _REFUSALS:
        if isinstance(err, kind):
            return DatabaseRefused(url, what, err)
    return None


@functools.lru_cache(maxsize=512)
def numbered(sql: str) -> str:
    """`?` placeholders -> `$1, $2, …` (a `?` inside a quoted literal is left alone)."""
    out: list[str] = []
    n = 0
    quote: str | None = None
    for ch in sql:
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in ("'", '"'):
            quote = ch
        elif ch == "?":
            n += 1
            out.append(f"${n}")
            continue
        out.append(ch)
    return "".join(out)


class PostgresConnection:
    dialect = POSTGRESQL

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        return list(await self._conn.fetch(numbered(sql), *args))

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        row: Row | None = await self._conn.fetchrow(numbered(sql), *args)
        return row

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self._conn.fetchval(numbered(sql), *args)

    async def execute(self, sql: str, *args: Any) -> int:
        status = await self._conn.execute(numbered(sql), *args)
        # "UPDATE 3", "INSERT 0 1", "DELETE 0"; "CREATE TABLE" changed no row.
        last = status.rsplit(" ", 1)[-1]
        return int(last) if last.isdigit() else 0

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            await self._conn.executemany(numbered(sql), rows)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        async with self._conn.transaction():
            yield


class PostgresDatabase:
    dialect = POSTGRESQL

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self.url = shown(dsn)
        self._pool: asyncpg.Pool | None = None
        # A pool belongs to the event loop that made it; another loop (a test's, a thread's)
        # gets its own.
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._pool_lock = asyncio.Lock()
        self._ready: set[str] = set()

    async def _connection_pool(self) -> asyncpg.Pool:
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._pool_loop is loop:
            return self._pool
        async with self._pool_lock:
            if self._pool is None or self._pool_loop is not loop:
                try:
                    self._pool = await asyncpg.create_pool(
                        self._dsn,
                        min_size=0,
                        max_size=POOL_SIZE,
                        max_inactive_connection_lifetime=IDLE_LIFETIME_S,
                        timeout=CONNECT_TIMEOUT_S,
                        server_settings={"application_name": "refund-bot"},
                    )
                    # min_size=0 connects nobody: try one now, so a wrong URL says so here.
                    async with self._pool.acquire() as conn:
                        await conn.fetchval("SELECT 1")
                except (OSError, TimeoutError, asyncpg.PostgresError) as err:
                    self._pool = None
                    raise self._sorted(err) from err
                self._pool_loop = loop
        return self._pool

    def _sorted(self, err: BaseException) -> DatabaseRefused | DatabaseUnavailable:
        """A failure to connect: refused for good (a wrong password, no such database), or an
        outage."""
        if (refused := refusal(err, self.url)) is not None:
            return refused
        return DatabaseUnavailable(
            f"cannot reach the database at DATABASE_URL={self.url}: {first_line(err)}"
        )

    @asynccontextmanager
    async def _acquire(self) -> AsyncIterator[asyncpg.Connection]:
        pool = await self._connection_pool()
        try:
            conn = await pool.acquire()
        except (OSError, TimeoutError, asyncpg.PostgresError) as err:
            raise self._sorted(err) from err
        try:
            yield conn
        finally:
            await pool.release(conn)

    @asynccontextmanager
    async def connect(self, schema: Schema) -> AsyncIterator[Connection]:
        if schema.name not in self._ready:
            await self.migrate(schema)
        async with self._acquire() as conn:
            try:
                yield traced(PostgresConnection(conn), schema)
            except asyncpg.PostgresError as err:
                if (refused := refusal(err, self.url)) is not None:
                    raise refused from err
                raise

    async def migrate(self, *schemas: Schema) -> None:
        pending = [s for s in schemas if s.name not in self._ready]
        if not pending:
            return
        async with self._acquire() as conn:
            for schema in pending:
                async with conn.transaction():
                    # Held to the end of this transaction: another process migrating waits
                    # here, then finds every version recorded. (CREATE TABLE IF NOT EXISTS
                    # alone is not safe when two run at once.)
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
                    await apply_migrations(PostgresConnection(conn), schema)
                self._ready.add(schema.name)

    @asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[bool]:
        # A connection of its own, outside the pool: the lock lives as long as the session, and
        # ends with it if this process dies (the server sees the connection close).
        try:
            conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, asyncpg.PostgresError) as err:
            raise self._sorted(err) from err
        try:
            held = await conn.fetchval("SELECT pg_try_advisory_lock($1)", lock_key(name))
            yield bool(held)
        finally:
            await conn.close()

    async def close(self) -> None:
        pool, self._pool, self._pool_loop = self._pool, None, None
        if pool is not None:
            await pool.close()

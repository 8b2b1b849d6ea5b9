"""The process's databases, one per DATABASE_URL: the backend the URL names, opened once.

database_for(settings) -> open_database(url) -> SqliteDatabase | PostgresDatabase (a pool)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.stores.database import Database
from agent.stores.urls import check_url, parse_sqlite_url

if TYPE_CHECKING:
    from agent.settings import AgentSettings

_databases: dict[str, Database] = {}


def open_database(url: str) -> Database:
    """The process's one Database for `url` (a PostgreSQL pool is shared by every store)."""
    if url not in _databases:
        _databases[url] = new_database(url)
    return _databases[url]


def new_database(url: str) -> Database:
    """A Database of its own for `url` (its own pool): what another process would have."""
    check_url(url)
    if url.startswith("sqlite"):
        from agent.stores.sqlite import SqliteDatabase

        return SqliteDatabase(parse_sqlite_url(url))
    from agent.stores.postgres import PostgresDatabase

    return PostgresDatabase(url)


def database_for(settings: AgentSettings) -> Database:
    """The database DATABASE_URL names; by default the SQLite files in DATA_DIR."""
    return open_database(settings.store_url)


async def close_database(url: str) -> None:
    """Close and forget the process's Database for `url`, if it has one."""
    database = _databases.pop(url, None)
    if database is not None:
        await database.close()


async def close_databases() -> None:
    """Close and forget every Database of this process: their idle connections and open files go
    (a test's end; the next open_database makes a new one)."""
    for url in list(_databases):
        await close_database(url)

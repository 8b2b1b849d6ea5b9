"""DATABASE_URL: which database the stores live in, checked once and shown without its password.

sqlite:///<directory>   one SQLite file per store in the directory (agent/stores/sqlite.py)
postgresql://…          one PostgreSQL database for every store (agent/stores/postgres.py)
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


class DatabaseUrlError(ValueError):
    """DATABASE_URL is not a URL refund-bot can use; the message says what to write instead."""


URL_FORMS = "sqlite:///<directory> (e.g. sqlite:///.data) or postgresql://user:password@host/db"


def sqlite_url(directory: Path) -> str:
    """The URL of the SQLite stores in `directory` (a relative path keeps three slashes)."""
    return f"sqlite:///{directory}"


def parse_sqlite_url(url: str) -> Path:
    """`sqlite:///<directory>` -> the directory holding one file per store."""
    directory = url.removeprefix("sqlite:///")
    if directory == url or not directory:
        raise DatabaseUrlError(f"DATABASE_URL={url!r} names no directory: write {URL_FORMS}")
    path = Path(directory)
    if path.is_file() or path.suffix in (".sqlite", ".sqlite3", ".db"):
        raise DatabaseUrlError(
            f"DATABASE_URL={url!r} names a file: a sqlite URL names the directory that holds "
            "one file per store, e.g. sqlite:///.data"
        )
    return path


def shown(url: str) -> str:
    """The URL as logs and messages may show it: the password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username}:***@{host}" if parts.username else f":***@{host}"
    return urlunsplit(parts._replace(netloc=netloc))


def check_url(url: str) -> str:
    """`url` if refund-bot can use it; DatabaseUrlError (one line, no password) otherwise."""
    scheme = url.partition("://")[0].lower()
    if scheme == "sqlite":
        parse_sqlite_url(url)
        return url
    if scheme in ("postgresql", "postgres"):
        parts = urlsplit(url)
        if not (parts.path.strip("/") or "dbname=" in parts.query or "database=" in parts.query):
            raise DatabaseUrlError(
                f"DATABASE_URL={shown(url)!r} names no database: add it after the host, e.g. "
                "postgresql://refund_bot:password@db.example.com:5432/refund_bot"
            )
        return url
    raise DatabaseUrlError(
        f"DATABASE_URL={shown(url)!r} is not a database refund-bot supports: write {URL_FORMS}"
    )

"""A store's errors, sorted as every other dependency's are: an outage is waited out, an answer no
retry can change ends the step at once.

On real SQLite files and a real PostgreSQL, under a real Worker: a wrong password, a missing table
and a write a constraint refuses each fail the conversation's step on its first attempt, and the
customer hears one plain sentence (the detail, without the password, is Event History's and the
log's); the database going away for a while delays the conversation, which then finishes. The
agent's stores are on the database under test; the thread (the local platform's store) is on
SQLite files of its own, so the customer still hears what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest
from pydantic import SecretStr
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError, RetryState

from agent.models import Timing
from agent.sayings import REFUND_FAILED, SOMETHING_WENT_WRONG, WAITING
from agent.settings import AgentSettings
from agent.stores import domain, ledger
from agent.stores.databases import database_for
from agent.stores.postgres import refusal as pg_refusal
from agent.stores.sqlite import SqliteDatabase
from agent.stores.sqlite import refusal as sqlite_refusal
from bot.local.thread_store import LocalThreadStore
from harness import free_port
from harness.conditions import wait_for
from harness.conversation import LocalConversation
from harness.inproc import running_worker
from harness.owner import refunds_made
from harness.postgres import PostgresServer

# Quick retries of two seconds, patience of minutes: a step still retrying is plain to see.
QUICK = Timing(quick_retry=timedelta(seconds=2), outage_patience=timedelta(minutes=5))
PASSWORD = "s3cret-never-shown"


def _settings(tmp_path: Path, url: str) -> AgentSettings:
    return AgentSettings(_env_file=None, data_dir=tmp_path, DATABASE_URL=SecretStr(url))


@contextlib.asynccontextmanager
async def _worker(client, tmp_path: Path, url: str) -> AsyncIterator[LocalConversation]:
    """A Worker whose stores are at `url` (migrated and seeded), and a conversation to open."""
    settings = _settings(tmp_path, url)
    threads = LocalThreadStore(SqliteDatabase(tmp_path / "threads"))
    async with running_worker(client, settings, threads) as task_queue:
        yield LocalConversation(client, threads, task_queue)


async def _failed_at_once(conv: LocalConversation) -> str:
    """The store broken, a conversation: its first step on the store fails on its first attempt,
    the thread hears the plain sentence and no wait, and the run fails with the refusal. Its
    message."""
    handle = await conv.open("please refund order 1234", timing=QUICK)
    said = await conv.answer_until_decided(timeout=30)
    assert said.text == SOMETHING_WENT_WRONG
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), 30)
    step = failed.value.cause
    assert isinstance(step, ActivityError), step
    assert step.retry_state == RetryState.NON_RETRYABLE_FAILURE  # no second attempt
    refusal = step.cause
    assert isinstance(refusal, ApplicationError) and refusal.type == "DatabaseRefused"
    assert WAITING not in [m.text for m in await conv.bot_messages()]
    assert PASSWORD not in refusal.message
    return refusal.message


async def test_a_missing_table_fails_the_step_at_once(client, tmp_path, database_url) -> None:
    database = database_for(_settings(tmp_path, database_url))
    async with _worker(client, tmp_path, database_url) as conv:
        async with database.connect(domain.SCHEMA) as db:
            await db.execute("DROP TABLE orders")
        said = await _failed_at_once(conv)
    assert "lacks what this code reads" in said and "orders" in said, said


async def test_a_wrong_password_fails_the_step_at_once(
    client, tmp_path, postgres: PostgresServer
) -> None:
    url = await postgres.create_password_database("refund_errors", PASSWORD)
    database = database_for(_settings(tmp_path, url))
    try:
        async with _worker(client, tmp_path, url) as conv:
            admin = await asyncpg.connect(postgres.admin_url)
            try:
                await admin.execute("ALTER ROLE refund_errors PASSWORD 'rotated'")
            finally:
                await admin.close()
            # As the pool's idle connections expire: the next connection logs in again.
            await database.close()
            said = await _failed_at_once(conv)
        assert "refused refund-bot's login" in said and "password authentication" in said, said
    finally:
        await postgres.drop_database(url)


async def test_a_write_a_constraint_refuses_fails_the_refund_at_once(
    client, tmp_path, database_url
) -> None:
    database = database_for(_settings(tmp_path, database_url))
    async with _worker(client, tmp_path, database_url) as conv:
        # The seed already holds a refund in dollars: this refund's row breaks the new rule.
        async with database.connect(ledger.SCHEMA) as db:
            await db.execute("CREATE UNIQUE INDEX one_refund_a_currency ON refunds (currency)")
        handle = await conv.open("please refund order 1234", timing=QUICK)
        assert (await conv.answer_until_decided(timeout=30)).text == REFUND_FAILED
        outcome = await asyncio.wait_for(handle.result(), 30)
        started = [
            e.activity_task_started_event_attributes.attempt
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        ]
        said = [m.text for m in await conv.bot_messages()]
    assert outcome.status == "failed" and "refused the write" in (outcome.detail or "")
    assert started == [1], started  # the refund, tried once
    assert WAITING not in said


async def test_the_database_away_for_a_while_delays_the_conversation(
    client, tmp_path, database_url, postgres: PostgresServer
) -> None:
    settings = _settings(tmp_path, database_url)
    database = database_for(settings)

    @contextlib.asynccontextmanager
    async def away() -> AsyncIterator[None]:
        if database_url.startswith("postgresql"):
            await postgres.take_down()
            try:
                yield
            finally:
                await postgres.bring_up()
            return
        # SQLite: the store's directory gone (a volume unmounted), so no file can be opened.
        await database.close()
        directory = tmp_path / "stores"
        directory.rename(tmp_path / "stores-away")
        try:
            yield
        finally:
            (tmp_path / "stores-away").rename(directory)

    async with _worker(client, tmp_path, database_url) as conv:
        await conv.open("please refund order 1234", timing=QUICK)
        assert (await conv.next_bot_message()).text == "Was the package opened?"
        async with away():
            await conv.reply("Yes")
            assert (await conv.next_bot_message()).text == "What was damaged?"
            await conv.reply("Split seam")

            async def told_to_wait() -> bool:
                return WAITING in [m.text for m in await conv.bot_messages()]

            await wait_for(told_to_wait, timeout=60, what="the thread told it waits")
        assert conv.handle is not None
        outcome = await asyncio.wait_for(conv.handle.result(), 120)
        said = [m.text for m in await conv.bot_messages()]
    assert outcome.status == "refunded", said
    assert said.count(WAITING) == 1 and SOMETHING_WENT_WRONG not in said
    assert len(await refunds_made(settings)) == 1


async def test_each_driver_error_is_sorted_as_an_outage_or_a_refusal(
    tmp_path, postgres: PostgresServer, postgres_url: str
) -> None:
    """The sorting itself, on errors the real drivers raise: what the conversation tests above
    cannot reach in seconds (a SQLite file locked past its busy timeout, say)."""
    path = tmp_path / "locked.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (k TEXT UNIQUE)")
    holder.execute("INSERT INTO t VALUES ('a')")
    holder.execute("BEGIN EXCLUSIVE")
    waiter = sqlite3.connect(path, timeout=0, isolation_level=None)
    sqlite_errors: dict[str, sqlite3.Error] = {}
    for name, sql in (
        ("locked", "INSERT INTO t VALUES ('b')"),
        ("no such table", "SELECT * FROM missing"),
        ("no such column", "SELECT missing FROM t"),
        ("constraint", "INSERT INTO t VALUES ('a')"),
    ):
        with pytest.raises(sqlite3.Error) as raised:
            waiter.execute(sql)
        sqlite_errors[name] = raised.value
        if name == "locked":
            holder.execute("ROLLBACK")
    holder.close()
    waiter.close()
    sorted_sqlite = {k: sqlite_refusal(e, "sqlite:///x") for k, e in sqlite_errors.items()}
    assert "database is locked" in str(sqlite_errors["locked"])
    assert isinstance(sqlite_errors["constraint"], sqlite3.IntegrityError)
    assert sorted_sqlite["locked"] is None, sqlite_errors["locked"]
    assert all(sorted_sqlite[k] is not None for k in ("no such table", "no such column"))
    assert sorted_sqlite["constraint"] is not None

    pg_errors: dict[str, BaseException] = {}
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute("CREATE TABLE t (k TEXT UNIQUE)")
        await conn.execute("INSERT INTO t VALUES ('a')")
        for name, sql in (
            ("no such table", "SELECT * FROM missing"),
            ("no such column", "SELECT missing FROM t"),
            ("constraint", "INSERT INTO t VALUES ('a')"),
            ("cancelled", "SET statement_timeout = 1; SELECT pg_sleep(1)"),
        ):
            with pytest.raises(asyncpg.PostgresError) as raised:
                await conn.execute(sql)
            pg_errors[name] = raised.value
    finally:
        await conn.close()
    url = await postgres.create_password_database("refund_sorting", PASSWORD)
    try:
        with pytest.raises(asyncpg.PostgresError) as refused:
            await asyncpg.connect(url.replace(PASSWORD, "wrong"))
        pg_errors["wrong password"] = refused.value
    finally:
        await postgres.drop_database(url)
    with pytest.raises(OSError) as unreachable:
        await asyncpg.connect(f"postgresql://refund@127.0.0.1:{free_port()}/refund")
    pg_errors["unreachable"] = unreachable.value
    sorted_pg = {k: pg_refusal(e, "postgresql://x") for k, e in pg_errors.items()}
    assert sorted_pg.pop("cancelled") is None and sorted_pg.pop("unreachable") is None
    assert isinstance(pg_errors["wrong password"], asyncpg.InvalidPasswordError)
    assert all(refusal is not None for refusal in sorted_pg.values()), pg_errors

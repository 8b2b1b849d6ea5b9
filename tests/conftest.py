"""Shared fixtures: one real Temporal dev server and one real PostgreSQL server per test session;
real SQLite files, or a PostgreSQL database of its own, per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent.settings import AgentSettings
from agent.stores.database import Database
from agent.stores.databases import close_database, close_databases, database_for, open_database
from agent.stores.urls import sqlite_url
from bot.local.thread_store import LocalThreadStore
from harness.conditions import CLOSE_CALL, MET, close_calls
from harness.dev_server import start_dev_server
from harness.postgres import PostgresServer
from worker.exit import exit_now


@pytest.fixture(autouse=True)
async def _databases_closed_after_each_test() -> AsyncIterator[None]:
    """Each test's Databases (one per data directory, kept by open_database) are closed when it
    ends: their idle SQLite connections would otherwise hold files open for the whole session,
    past select()'s 1,024 descriptors (the terminal tests read their pty with it)."""
    yield
    await close_databases()


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await start_dev_server(dev_server_log_level="error")
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture
def agent_settings(tmp_path) -> AgentSettings:
    # _env_file=None: a developer's own .env must not leak into a test.
    return AgentSettings(_env_file=None, data_dir=tmp_path)


@pytest.fixture
def threads(agent_settings: AgentSettings) -> LocalThreadStore:
    """The local platform's threads in this test's data directory (the agent's posts land here)."""
    return LocalThreadStore(database_for(agent_settings))


@pytest.fixture(scope="session")
async def postgres() -> AsyncIterator[PostgresServer]:
    """PostgreSQL 16 from the pgserver wheel, started here (harness/postgres.py)."""
    server = PostgresServer()
    try:
        await server.start()
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def postgres_url(postgres: PostgresServer) -> AsyncIterator[str]:
    """A fresh, empty PostgreSQL database for one test."""
    url = await postgres.create_database()
    try:
        yield url
    finally:
        await postgres.drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
async def database_url(
    request: pytest.FixtureRequest, tmp_path, postgres: PostgresServer
) -> AsyncIterator[str]:
    """A test that takes this runs once on each backend: SQLite files in tmp_path, then a fresh
    PostgreSQL database. (Both ask for the session's server: pytest-asyncio cannot start an
    async session fixture from inside another fixture.)"""
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "stores")
        try:
            yield url
        finally:
            await close_database(url)
        return
    url = await postgres.create_database()
    try:
        yield url
    finally:
        await postgres.drop_database(url)


@pytest.fixture
def database(database_url: str) -> Database:
    return open_database(database_url)


_EXIT_STATUS = pytest.StashKey[int]()  # pytest's own status, kept for pytest_unconfigure


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    # The last hook, after every report is written: end with pytest's own status rather than
    # risk the SDK aborting finalization and failing a green run (see worker/exit.py).
    status = config.stash.get(_EXIT_STATUS, None)
    if status is not None:
        exit_now(status)


_WORKERS_CLOSE_CALLS = pytest.StashKey[list[str]]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_EXIT_STATUS] = int(exitstatus)
    # Under pytest-xdist each worker process hands its close calls to the controller.
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["close_calls"] = close_calls(MET)


def pytest_testnodedown(node, error) -> None:  # pytest-xdist's hook, on the controller
    lines = node.config.stash.setdefault(_WORKERS_CLOSE_CALLS, [])
    lines.extend(getattr(node, "workeroutput", {}).get("close_calls", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # A wait met with little of its deadline left passes here and fails on a busier machine:
    # named in every run, before CI finds it.
    workers = terminalreporter.config.stash.get(_WORKERS_CLOSE_CALLS, [])
    if lines := close_calls(MET) + workers:
        terminalreporter.section(f"waits that used {CLOSE_CALL:.0%} of their deadline or more")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture
def shared_database(tmp_path, postgres_url: str):  # -> tests.support.shared_database.SharedDatabase
    """The database the processes of a multi-process test share: PostgreSQL (see its module)."""
    from tests.support.shared_database import shared_database_at

    return shared_database_at(tmp_path, postgres_url)

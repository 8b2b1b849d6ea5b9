"""Shared fixtures: one real Temporal dev server per test session, real SQLite files per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent.settings import AgentSettings
from tests.support.codec import TEST_CONVERTER
from worker.exit import exit_now
from worker.server import temporal_cli_path


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli_path()),
        data_converter=TEST_CONVERTER,
        dev_server_log_level="error",
    )
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
    return AgentSettings(_env_file=None, data_dir=tmp_path)  # type: ignore[call-arg]


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    # The last hook, after every report is written: end with pytest's own status rather than
    # risk the SDK aborting finalization and failing a green run (see worker/exit.py).
    status = getattr(config, "_refund_bot_exitstatus", None)
    if status is not None:
        exit_now(status)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._refund_bot_exitstatus = int(exitstatus)  # type: ignore[attr-defined]


@pytest.fixture
def shared_database(tmp_path):  # -> tests.support.shared_database.SharedDatabase
    """The database the processes of a multi-process test share (see its module)."""
    from tests.support.shared_database import shared_database_at

    return shared_database_at(tmp_path)

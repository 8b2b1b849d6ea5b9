"""An in-process Worker, for tests that do not need to kill it and for recording scripts."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from temporalio.client import Client

from agent.activities.authorize import GrantSource
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from bot.local.thread_store import LocalThreadStore
from harness.dev_server import start_dev_server
from worker.runner import build_worker


@asynccontextmanager
async def running_worker(
    client: Client,
    settings: AgentSettings,
    threads: LocalThreadStore,
    task_queue: str | None = None,
    *,
    grant_sources: Mapping[str, GrantSource] | None = None,
) -> AsyncIterator[str]:
    """An in-process Worker on `task_queue` (a fresh one unless given); yields the queue.
    `grant_sources`: a platform's live grants (a Slack user group, say), as wiring gives them."""
    task_queue = task_queue or f"test-{uuid.uuid4().hex[:8]}"
    worker = await build_worker(client, task_queue, settings, {"local": threads}, grant_sources)
    async with worker:
        yield task_queue


@asynccontextmanager
async def standalone_agent(
    **settings_overrides: Any,
) -> AsyncIterator[tuple[Client, LocalThreadStore, str]]:
    """For scripts outside pytest: a dev server of its own, a fresh data directory and an
    in-process Worker encrypting with the tests' codec key (its AgentSettings changed by
    `settings_overrides`). Yields the client, the local thread store and the task queue."""
    env = await start_dev_server()
    with tempfile.TemporaryDirectory() as tmp:
        settings = AgentSettings(
            _env_file=None,
            data_dir=Path(tmp),
            **settings_overrides,
        )
        threads = LocalThreadStore(database_for(settings))
        async with env, running_worker(env.client, settings, threads) as task_queue:
            yield env.client, threads, task_queue

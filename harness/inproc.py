"""An in-process Worker, for tests that do not need to kill it and for recording scripts."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NamedTuple

from temporalio.client import Client

from agent.activities.authorize import GrantSource
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from bot.local.thread_store import LocalThreadStore
from harness.dev_server import start_dev_server
from worker.runner import build_worker
from worker.settings import DEFAULT_CACHED_CONVERSATIONS


@asynccontextmanager
async def running_worker(
    client: Client,
    settings: AgentSettings,
    threads: LocalThreadStore,
    task_queue: str | None = None,
    *,
    grant_sources: Mapping[str, GrantSource] | None = None,
    cached_conversations: int = DEFAULT_CACHED_CONVERSATIONS,
) -> AsyncIterator[str]:
    """An in-process Worker on `task_queue` (a fresh one unless given); yields the queue.
    `grant_sources`: a platform's live grants (a Slack user group, say), as wiring gives them."""
    task_queue = task_queue or f"test-{uuid.uuid4().hex[:8]}"
    worker = await build_worker(
        client,
        task_queue,
        settings,
        {"local": threads},
        grant_sources,
        cached_conversations=cached_conversations,
    )
    async with worker:
        yield task_queue


class StandaloneAgent(NamedTuple):
    client: Client
    threads: LocalThreadStore
    task_queue: str
    settings: AgentSettings


@asynccontextmanager
async def standalone_agent(
    settings_overrides: Mapping[str, Any] | None = None,
    *,
    cached_conversations: int = DEFAULT_CACHED_CONVERSATIONS,
) -> AsyncIterator[StandaloneAgent]:
    """For scripts outside pytest: a dev server of its own, a fresh data directory and an
    in-process Worker encrypting with the tests' codec key (its AgentSettings changed by
    `settings_overrides`, its cache holding `cached_conversations`)."""
    env = await start_dev_server()
    with tempfile.TemporaryDirectory() as tmp:
        settings = AgentSettings(
            _env_file=None,
            data_dir=Path(tmp),
            **(settings_overrides or {}),
        )
        threads = LocalThreadStore(database_for(settings))
        worker = running_worker(
            env.client, settings, threads, cached_conversations=cached_conversations
        )
        async with env, worker as task_queue:
            yield StandaloneAgent(env.client, threads, task_queue, settings)

"""An in-process Worker for tests that do not need to kill it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio.client import Client

from agent.settings import AgentSettings
from bot.local.thread_store import LocalThreadStore
from worker.runner import build_worker


@asynccontextmanager
async def running_worker(
    client: Client, settings: AgentSettings, threads: LocalThreadStore
) -> AsyncIterator[str]:
    task_queue = f"test-{uuid.uuid4().hex[:8]}"
    worker = await build_worker(client, task_queue, settings, {"local": threads})
    async with worker:
        yield task_queue

"""Record the control Workflows' Event Histories that tests/test_worker_pause.py replays: the
RestartWorker a `/crash-worker` request runs on a supervisor, and the presenter's paused restart
(demo/paused_restart.py).

    uv run python -m tests.control_histories.record [name ...]      (no names: every scenario)

    dev server -> a supervisor with the dummy Worker child -> the scenario's restart -> <name>.json

Encrypted with the tests' codec key, like tests/histories/. A history recorded before the control
Workflow changed stays as it was recorded, in a `before-*` folder: the proof that a restart
running at the deploy still replays.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import Client, WorkflowHandle

from demo.paused_restart import paused_worker_restart
from demo.worker_hold import WorkerHold
from harness import queue_settings
from harness.codec import TEST_CODEC_ENV
from harness.dev_server import start_dev_server
from worker.control import request_worker_restart
from worker.supervisor import WorkerSupervisor

HERE = Path(__file__).parent
CHILD = [sys.executable, "-m", "tests.support.dummy_worker"]


async def plain(client: Client, control_task_queue: str) -> WorkflowHandle:
    """/crash-worker: kill and start in one Activity."""
    await request_worker_restart(client, control_task_queue)
    [restart] = [wf async for wf in client.list_workflows("WorkflowType = 'RestartWorker'")]
    return client.get_workflow_handle(restart.id)


async def paused(client: Client, control_task_queue: str) -> WorkflowHandle:
    """A paused restart: killed, held while the caller reads, resumed by its Signal."""

    async def read() -> None:
        pass  # what the caller does here leaves nothing in this history

    await paused_worker_restart(client, control_task_queue, None, read)
    query = "WorkflowType = 'PausedRestartWorker'"
    [restart] = [wf async for wf in client.list_workflows(query)]
    return client.get_workflow_handle(restart.id)


SCENARIOS: dict[str, Callable[[Client, str], Awaitable[WorkflowHandle]]] = {
    "restart_worker": plain,
    "restart_worker_paused": paused,
}


async def record(names: list[str]) -> None:
    for name in names:
        # A server each: the listing above finds the one restart this scenario made.
        env = await start_dev_server()
        async with env:
            settings = queue_settings(env.client, "record")
            async with WorkerSupervisor(
                settings, CHILD, client=env.client, env=TEST_CODEC_ENV, control=WorkerHold
            ):
                handle = await SCENARIOS[name](env.client, settings.control_task_queue)
                history = await handle.fetch_history()
        (HERE / f"{name}.json").write_text(history.to_json())
        print(f"recorded {name}.json ({len(history.events)} events)")


if __name__ == "__main__":
    asyncio.run(record(sys.argv[1:] or list(SCENARIOS)))

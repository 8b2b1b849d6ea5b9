"""A minimal Worker child for the supervisor tests, honouring the child contract.

Run as `python -m tests.support.dummy_worker`. It reads TemporalSettings from the environment the
supervisor sets (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_TASK_QUEUE, REFUND_BOT_HOST) and its
codec keys from CODEC_KEYS, polls `settings.task_queue` with the identity `worker_identity()` on
its host and exits cleanly on SIGTERM. Started without a supervisor (no lifeline), it first resets
the conversations its host's gone predecessors held (worker.runner.reset_previous_here).

A test opens a conversation sticky to it with start_sticky_echo.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from agent.settings import TemporalSettings
from agent.temporal_client import connect
from harness.conditions import wait_for
from worker.control import worker_identity
from worker.lifecycle import LIFELINE_ENV
from worker.runner import reset_previous_here
from worker.settings import DEFAULT_STICKY_TIMEOUT, ProcessSettings

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle


@workflow.defn(name="Echo")
class Echo:
    """Waits for one `reply` signal and echoes it: a conversation that stays open."""

    def __init__(self) -> None:
        self._reply: str | None = None

    @workflow.run
    async def run(self, greeting: str) -> str:
        await workflow.wait_condition(lambda: self._reply is not None)
        return f"{greeting} {self._reply}"

    @workflow.signal
    def reply(self, text: str) -> None:
        self._reply = text


async def start_sticky_echo(client: Client, task_queue: str) -> WorkflowHandle[Any, str]:
    """An open conversation whose first task ran on the current child: sticky to that child."""
    handle = await client.start_workflow(
        "Echo", "hello", id=f"echo-{uuid.uuid4().hex[:8]}", task_queue=task_queue, result_type=str
    )

    async def first_task_done() -> bool:
        history = await handle.fetch_history()
        done = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        return any(e.event_type == done for e in history.events)

    await wait_for(first_task_done, timeout=10, what="Echo's first workflow task")
    return handle


async def sticky_waits(handle: WorkflowHandle[Any, str]) -> list[float]:
    """Seconds each of `handle`'s workflow tasks waited before it timed out schedule-to-start."""
    events = (await handle.fetch_history()).events
    scheduled = {e.event_id: e.event_time.ToDatetime() for e in events}
    return [
        (e.event_time.ToDatetime() - scheduled[attrs.scheduled_event_id]).total_seconds()
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
        and (attrs := e.workflow_task_timed_out_event_attributes).timeout_type
        == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START
    ]


async def main() -> None:
    # Only the environment the supervisor gave us: a developer's .env must not redirect a test.
    settings = TemporalSettings(_env_file=None)
    host = ProcessSettings(_env_file=None).host
    client = await connect(settings)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    identity = worker_identity(host=host)
    # As `refund-bot worker` does when no supervisor started it (no lifeline).
    if LIFELINE_ENV not in os.environ:
        await reset_previous_here(client, settings.task_queue, host)
    async with Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[Echo],
        identity=identity,
        # Replays cheap enough for a crowd: in the sandbox each Workflow re-imports this module's
        # imports (the settings, the client, the control plane), seconds for a few hundred.
        workflow_runner=UnsandboxedWorkflowRunner(),
        sticky_queue_schedule_to_start_timeout=DEFAULT_STICKY_TIMEOUT,  # as the real Worker's
    ):
        await stop.wait()


if __name__ == "__main__":
    # Import under the real module name, so the workflow sandbox can re-import Echo's module.
    from tests.support.dummy_worker import main as _main

    asyncio.run(_main())

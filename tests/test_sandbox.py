"""The Worker runs Workflow code in the SDK's sandboxed runner (its default: worker.runner passes
no other), so Workflow code that breaks determinism is refused, not run."""

from __future__ import annotations

import uuid
from datetime import datetime

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.worker import Worker

from harness.conditions import wait_for


@workflow.defn(sandboxed=True)
class ReadsTheWallClock:
    @workflow.run
    async def run(self) -> str:
        return datetime.now().isoformat()  # not deterministic: the sandbox must refuse it


async def test_the_workers_runner_refuses_what_the_sandbox_refuses(client) -> None:
    task_queue = f"sandbox-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, workflows=[ReadsTheWallClock]):
        handle = await client.start_workflow(
            ReadsTheWallClock.run, id=f"wall-clock-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )

        async def failed_task() -> BaseException | None:
            async for event in handle.fetch_history_events():
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    # Encrypted, as every failure is (the codec): decoded as a client reads it.
                    failure = event.workflow_task_failed_event_attributes.failure
                    return await client.data_converter.decode_failure(failure)
            return None

        error = await wait_for(failed_task, timeout=30, what="the workflow task to fail")
        await handle.terminate()
    assert "Cannot access datetime.datetime.now" in str(error)

"""Who is alive on a task queue, as worker.pollers reads it from Temporal: heartbeats decide; a
warning also counts the polls of a Worker Temporal has no heartbeat of at all."""

from __future__ import annotations

import uuid

from temporalio import workflow
from temporalio.client import Client
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from harness.codec import TEST_CONVERTER
from harness.conditions import wait_for
from worker.pollers import heartbeats, other_workers, worker_is_polling


@workflow.defn(name="Idle")
class Idle:
    @workflow.run
    async def run(self) -> None:
        return None


async def test_a_worker_temporal_has_no_heartbeat_of_is_warned_of_while_it_polls(
    temporal_env: WorkflowEnvironment,
) -> None:
    """A Worker whose heartbeats never reach Temporal polls all the same: the start-up warning of
    other Workers names it (it read as none at all while other Workers' heartbeats were on
    record). Decisions and counts go by heartbeats alone: Temporal drops a dead Worker's record
    within seconds, while its poll stays listed for minutes."""
    client = temporal_env.client
    queue = f"pollers-{uuid.uuid4().hex[:8]}"
    # Another Worker heartbeats (the session's Runtime does): Temporal keeps heartbeats.
    beating = Worker(client, task_queue=f"{queue}-beating", workflows=[Idle])
    silent_client = await Client.connect(
        client.service_client.config.target_host,
        data_converter=TEST_CONVERTER,
        runtime=Runtime(telemetry=TelemetryConfig(), worker_heartbeat_interval=None),
    )
    silent = Worker(silent_client, task_queue=queue, workflows=[Idle], identity="4242@elsewhere")
    async with beating, silent:

        async def recorded() -> bool:
            return bool(await heartbeats(client, "default", f"{queue}-beating"))

        await wait_for(recorded, timeout=30, what="the beating Worker's heartbeat on record")
        await wait_for(
            lambda: worker_is_polling(client, "default", queue, "4242@elsewhere"),
            timeout=30,
            what="the silent Worker's poll",
        )
        assert await heartbeats(client, "default", queue) == []  # never heard from
        warned = await other_workers(client, "default", queue, unheard_polls=True)
        assert [(w.identity, w.pid, w.host) for w in warned] == [
            ("4242@elsewhere", 4242, "elsewhere")
        ]
        assert await other_workers(client, "default", queue) == []

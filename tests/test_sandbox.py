"""The Worker's workflow runner compiles the SDK's code strings once and reads payload contexts
without entering the sandbox; it gives the same contexts, and is still the sandbox.

A Replayer runs a committed conversation as a Worker taking it over does; the runner is the one
worker.runner.build_worker gives the Worker.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.converter import (
    ActivitySerializationContext,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
)
from temporalio.worker import Replayer, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from agent.workflow import RefundConversation
from harness.codec import TEST_CONVERTER
from harness.conditions import wait_for
from worker import sandbox
from worker.sandbox import CompiledOnceSandboxRunner

HISTORY = Path(__file__).parent / "histories" / "auto_approved.json"


async def test_replaying_a_conversation_compiles_each_code_string_once() -> None:
    history = WorkflowHistory.from_json("auto-approved", HISTORY.read_text())
    replayer = Replayer(
        workflows=[RefundConversation],
        data_converter=TEST_CONVERTER,
        workflow_runner=CompiledOnceSandboxRunner(),
    )
    sandbox.compiled.cache_clear()
    for _ in range(2):
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None
    runs = sandbox.compiled.cache_info()
    # Per conversation and per activation the SDK enters the sandbox with one of a few code
    # strings; each was compiled once, however many conversations and activations ran it.
    assert runs.misses <= 8, runs
    assert runs.hits >= 30, runs


@dataclass
class ContextRecordingCodec(PayloadCodec, WithSerializationContext):
    """The tests' codec, writing down the serialization context of every payload it handles."""

    inner: PayloadCodec
    seen: list[SerializationContext | None]
    context: SerializationContext | None = None

    def with_context(self, context: SerializationContext) -> ContextRecordingCodec:
        return ContextRecordingCodec(self.inner, self.seen, context)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.seen.append(self.context)
        return await self.inner.encode(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.seen.append(self.context)
        return await self.inner.decode(payloads)


async def _contexts(runner: WorkflowRunner) -> list[SerializationContext | None]:
    seen: list[SerializationContext | None] = []
    assert TEST_CONVERTER.payload_codec is not None
    converter = dataclasses.replace(
        TEST_CONVERTER, payload_codec=ContextRecordingCodec(TEST_CONVERTER.payload_codec, seen)
    )
    replayer = Replayer(
        workflows=[RefundConversation], data_converter=converter, workflow_runner=runner
    )
    history = WorkflowHistory.from_json("auto-approved", HISTORY.read_text())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None
    return seen


async def test_every_payload_gets_the_context_the_sdks_sandbox_gives_it() -> None:
    """The contexts are read without entering the sandbox: they must be the ones the SDK's own
    path (an exec inside it, per payload) computes, payload for payload."""
    ours = await _contexts(CompiledOnceSandboxRunner())
    assert ours == await _contexts(SandboxedWorkflowRunner())
    # Not only the workflow's own context: the Activities' and local activities' too.
    steps = [c for c in ours if isinstance(c, ActivitySerializationContext)]
    assert {c.is_local for c in steps} == {True, False}
    assert {c.activity_type for c in steps} >= {"post_to_thread", "issue_refund"}


@workflow.defn(sandboxed=True)
class ReadsTheWallClock:
    @workflow.run
    async def run(self) -> str:
        return datetime.now().isoformat()  # not deterministic: the sandbox must refuse it


async def test_the_runner_still_refuses_what_the_sandbox_refuses(client) -> None:
    task_queue = f"sandbox-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[ReadsTheWallClock],
        workflow_runner=CompiledOnceSandboxRunner(),
    ):
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

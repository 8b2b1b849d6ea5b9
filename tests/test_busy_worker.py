"""A busy Worker does not get a refund or a model call retried: their heartbeat timeout counts
from the server's hand-over of the task, and a Worker busy with other conversations starts it
late."""

from __future__ import annotations

import time
import uuid
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from agent.models import ConversationOutcome
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from agent.stores.ledger import Ledger
from agent.stores.sqlite import SqliteDatabase
from bot.local.thread_store import LocalThreadStore
from harness.conversation import LocalConversation
from harness.fakes.openai_api import FakeOpenAI
from tests.support.first_activity import BeforeFirst
from worker.runner import build_worker

# Longer than a 4 s heartbeat timeout plus the first heartbeat's second: what a Worker busy with
# other conversations was measured to take, under load, between taking a task and starting it.
BUSY_SECONDS = 6.0

# Every decide step's first attempt starts BUSY_SECONDS late, and the model's path takes three of
# them (two lookups chosen, then the question) before the first question shows: a wait for the
# agent's next message allows for those on top of the harness's usual 20 s.
NEXT_MESSAGE_DEADLINE = 20.0 + 3 * BUSY_SECONDS


def busy_first(activity_type: str) -> BeforeFirst:
    """The first Activity named `activity_type` that the Worker runs starts BUSY_SECONDS late (one
    late start is the case; each decide step's, three before the first question, only made the
    test slow and its waits long)."""

    async def busy() -> None:
        # The Worker's event loop held (as by other conversations' work, GIL and all) after
        # Temporal handed the task over and before the Activity's first line runs.
        time.sleep(BUSY_SECONDS)  # noqa: ASYNC251

    return BeforeFirst(activity_type, busy)


async def _late_once(
    client, settings: AgentSettings, threads: LocalThreadStore, activity_type: str, **opened: Any
) -> tuple[WorkflowHandle, ConversationOutcome]:
    """One conversation to its end on a Worker that starts `activity_type`'s first attempt
    BUSY_SECONDS late; no Activity of it timed out meanwhile."""
    task_queue = f"test-busy-{uuid.uuid4().hex[:8]}"
    worker = await build_worker(
        client, task_queue, settings, {"local": threads}, interceptors=[busy_first(activity_type)]
    )
    async with worker:
        conv = LocalConversation(client, threads, task_queue)
        handle = await conv.open("please refund order 1234", **opened)
        for answer in ("Yes", "Split seam"):
            await conv.next_bot_message(timeout=NEXT_MESSAGE_DEADLINE)
            await conv.reply(answer)
        outcome = await handle.result()
    history = await handle.fetch_history()
    assert not any(
        e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT for e in history.events
    )
    return handle, outcome


async def test_a_refund_started_late_by_a_busy_worker_is_not_retried(
    client, agent_settings, threads
) -> None:
    handle, outcome = await _late_once(client, agent_settings, threads, "issue_refund")
    assert outcome.status == "refunded"
    refunds = await Ledger(database_for(agent_settings)).refunds_for_workflow(handle.id)
    # The owner was asked once: no attempt timed out while the first was still to run.
    assert [r.calls for r in refunds] == [1]


async def test_a_model_call_started_late_by_a_busy_worker_is_not_paid_twice(
    client, tmp_path
) -> None:
    async with FakeOpenAI() as model:
        threads = LocalThreadStore(SqliteDatabase(tmp_path))
        _, outcome = await _late_once(
            client, model.agent_settings(tmp_path), threads, "decide_next_step", decider="openai"
        )
    assert outcome.status == "refunded"
    # One call a step, three steps (the first of them started late): none timed out and was
    # called again.
    assert len(model.requests) == 3


async def test_effects_are_polled_apart_from_the_conversations_local_steps(
    client, agent_settings, threads
) -> None:
    """A Worker's core hands over its next local step before any regular Activity task it has
    taken (whose heartbeat clock is then running on the server): one Worker under a steady stream
    of conversations started refunds 55 s late, and about 100 in 1,000 were asked twice. The
    conversations' Worker takes no regular Activity task; a second one, with no workflows, takes
    them all."""
    pair = await build_worker(
        client, f"test-pair-{uuid.uuid4().hex[:6]}", agent_settings, {"local": threads}
    )
    conversations, effects = pair.conversations.config(), pair.effects.config()
    assert conversations.get("no_remote_activities") is True
    assert conversations.get("workflows")
    assert not effects.get("workflows") and not effects.get("no_remote_activities")
    assert list(effects.get("activities", [])) == list(conversations.get("activities", []))

"""What survives, read from Event History alone, at every point of a conversation.

The offline policy's decide step is a local activity whose input (the working memory) is not
recorded: the answers come from the customer's Signals and the decide steps' results. Cut a
committed history anywhere (a conversation whose Worker died there) and the reading must say what
the Workflow itself would.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory

from agent.decoded_history import decoded_history
from agent.history import Survivors, survivors_from_history, what_survives
from agent.stores.databases import database_for
from bot.local.thread_store import LocalThreadStore
from harness.codec import TEST_CONVERTER
from harness.conversation import SUPPORT, LocalConversation
from harness.inproc import running_worker

ROOT = Path(__file__).parent / "histories"
BOTH = {"item_opened": "Yes", "damage": "Split seam"}
ALL_LOOKUPS = ["lookup_order", "lookup_customer_history", "check_refund_policy"]


async def _history(name: str) -> WorkflowHistory:
    path = ROOT / f"{name}.json"
    return await decoded_history(WorkflowHistory.from_json(name, path.read_text()), TEST_CONVERTER)


def _signal(name: str, nth: int = 1) -> Callable[[list[HistoryEvent]], int]:
    """The index of the nth Signal called `name`."""

    def find(events: list[HistoryEvent]) -> int:
        found = [
            i
            for i, e in enumerate(events)
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            and e.workflow_execution_signaled_event_attributes.signal_name == name
        ]
        return found[nth - 1]

    return find


def _refund_scheduled(events: list[HistoryEvent]) -> int:
    return next(
        i
        for i, e in enumerate(events)
        if e.activity_task_scheduled_event_attributes.activity_type.name == "issue_refund"
    )


def _cut(history: WorkflowHistory, end: int) -> Survivors:
    """What survives of a conversation whose history ends at event index `end` (excluded)."""
    return survivors_from_history(
        WorkflowHistory(history.workflow_id, list(history.events)[:end]), TEST_CONVERTER
    )


async def test_an_escalated_conversation_read_back_at_every_stage() -> None:
    history = await _history("escalated")  # order 4500, held before the refund
    events = list(history.events)
    yes, click, release = _signal("customer_message", 2), _signal("approval"), _signal("release")

    # The order and the history are read before the first question.
    asked = _cut(history, yes(events))
    assert asked.answers == {} and asked.lookups == ALL_LOOKUPS[:2]
    assert asked.next_action == "wait for the customer's answer to: Was the package opened?"
    assert asked.next_deadline and asked.next_deadline.startswith("remind the customer at ")

    # The answer is in history; no Worker has taken it in yet.
    answered = _cut(history, yes(events) + 1)
    assert answered.answers == {"item_opened": "Yes"}
    assert answered.next_action == "decide next step"

    escalated = _cut(history, click(events))
    assert escalated.answers == BOTH and escalated.lookups == ALL_LOOKUPS
    assert escalated.order and escalated.order.order_number == "4500"
    assert escalated.next_action == "wait for a support agent's approval"
    assert escalated.next_deadline and escalated.next_deadline.startswith("remind the approvers")

    assert _cut(history, click(events) + 1).next_action == "issue refund"
    held = _cut(history, release(events))
    assert held.next_action == "issue refund" and held.refund.state == "not started"

    in_flight = _cut(history, _refund_scheduled(events) + 1)
    assert in_flight.refund.state == "in flight"
    assert in_flight.next_action == "issue refund (in flight)"
    # The two lookups together, two questions, the policy check, then the decision.
    assert in_flight.decide_calls == 5
    assert in_flight.customer_signals == 3


async def test_a_click_on_an_earlier_round_leaves_the_conversation_waiting() -> None:
    history = await _history("stale_click")
    events = list(history.events)
    # Round 1 approved by someone without a grant (refused, round 2 posted), then a late click on
    # round 1's buttons: dropped. Round 2's approval is the third click.
    late = _signal("approval", 2)(events)
    assert _cut(history, late + 1).next_action == "wait for a support agent's approval"
    assert _cut(history, _signal("approval", 3)(events) + 1).next_action == "issue refund"


async def test_a_deny_click_is_not_read_as_an_approval() -> None:
    history = await _history("declined")
    events = list(history.events)
    click = _signal("approval")(events)
    assert _cut(history, click).next_action == "wait for a support agent's approval"
    denied = _cut(history, click + 1).next_action
    assert denied == "check the Deny click's grant, then tell the customer the refund is denied"


@pytest.mark.parametrize("name", ["auto_approved", "escalated", "reoffered", "declined"])
async def test_every_cut_reads_and_answers_only_grow(name: str) -> None:
    history = await _history(name)
    known: dict[str, str] = {}
    for end in range(1, len(history.events) + 1):
        survivors = _cut(history, end)
        assert known.items() <= survivors.answers.items(), end
        known = survivors.answers
    assert known == BOTH


async def test_what_survives_agrees_with_the_live_view(client, agent_settings) -> None:
    """At each stage of a live conversation, Event History alone says what the Query says."""
    threads = LocalThreadStore(database_for(agent_settings))
    async with running_worker(client, agent_settings, threads) as queue:
        conv = LocalConversation(client, threads, queue)
        handle = await conv.open("please refund order 4500", hold=True)

        async def agree(phase: str) -> Survivors:
            view = await conv.wait_phase(phase)
            survivors = await what_survives(client, handle.id)
            assert (survivors.answers, survivors.lookups, survivors.next_action) == (
                view.answers,
                view.lookups,
                view.next_action,
            ), phase
            return survivors

        await conv.next_bot_message()
        await agree("waiting_for_customer")
        await conv.reply("Yes")
        await conv.next_bot_message()
        await agree("waiting_for_customer")
        await conv.reply("Split seam")
        await conv.next_bot_message()  # the escalation
        assert (await agree("waiting_for_approval")).order is not None
        await conv.click("approve", SUPPORT, round=1)
        await conv.next_bot_message()  # held before the refund
        await agree("held_before_refund")
        await handle.signal("release")
        await conv.wait_phase("closed")
        closed = await what_survives(client, handle.id)
    assert closed.refund.state == "succeeded"

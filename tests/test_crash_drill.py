"""The crash drills: a real Worker process, really SIGKILLed, on a real Temporal dev server."""

from __future__ import annotations

import asyncio
import os
import signal

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from agent.history import what_survives
from agent.stores.databases import database_for
from agent.stores.ledger import Ledger
from harness.conditions import wait_for
from harness.conversation import LocalConversation
from harness.events import local_activity
from harness.kill_drill import run_drill
from harness.owner import refunds_made
from harness.stack import supervised_stack
from refund_bot.config import DRILL
from refund_bot.demos import worker_interceptors
from refund_bot.wiring import local_thread_store
from worker.control import request_worker_restart
from worker.lifecycle import alive
from worker.pair import WorkerPair
from worker.runner import build_worker

LOOP_STEPS = ("decide_next_step", "lookup_order", "lookup_customer_history", "check_refund_policy")


async def _scheduled(handle: WorkflowHandle) -> dict[str, list[int]]:
    """Step name -> the attempt each recorded run completed on: Activities (their started events)
    and local activities (their markers)."""
    history = await handle.fetch_history()
    names: dict[int, str] = {}
    attempts: dict[str, list[int]] = {}
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            attempts.setdefault(names[attrs.scheduled_event_id], []).append(attrs.attempt)
        elif (local := local_activity(event)) is not None:
            attempts.setdefault(local["activity_type"], []).append(local["attempt"])
    return attempts


async def test_sigkill_while_held_resumes_without_repeating(temporal_env, tmp_path) -> None:
    client = temporal_env.client
    async with supervised_stack(temporal_env, tmp_path) as stack:
        supervisor = stack.supervisor
        assert supervisor is not None  # supervised_stack's
        threads = local_thread_store(stack.settings)
        conv = LocalConversation(client, threads, stack.temporal.task_queue)
        handle = await conv.open("please refund order 1234", hold=True)
        assert (await conv.next_bot_message()).text == "Was the package opened?"
        await conv.reply("Yes")
        assert (await conv.next_bot_message()).text == "What was damaged?"
        await conv.reply("Split seam")
        await conv.next_bot_message()  # "Refund of $80.00 approved. Holding ..."
        assert (await conv.wait_phase("held_before_refund")).next_action == "issue refund"
        before = await _scheduled(handle)
        # Two questions, both lookups in one turn, the decision: four decide steps.
        assert len(before["decide_next_step"]) == 4 and before["lookup_order"] == [1]

        # The crash, through the control queue as /crash-worker sends it: the warm standby
        # takes over, and a new standby is prepared.
        standby = supervisor.standby_pid
        assert standby is not None and alive(standby)
        report = await request_worker_restart(client, stack.temporal.control_task_queue)
        old_pid = report.old_pid
        assert old_pid and report.new_pid == standby != old_pid
        await wait_for(lambda: not alive(old_pid), what="the old Worker gone")
        assert alive(report.new_pid)
        assert supervisor.standby_pid not in (None, standby, old_pid)

        # Unannounced: kill -9 of the Worker's pid. The supervisor sees the death and promotes.
        standby = supervisor.standby_pid
        os.kill(report.new_pid, signal.SIGKILL)
        await wait_for(lambda: supervisor.pid == standby, what="the standby promoted")
        # Prepared once the promoted one polls (it may still have been starting up).
        await wait_for(
            lambda: supervisor.standby_pid not in (None, standby),
            timeout=60,
            what="a standby",
        )

        # No Worker at all now: what survives still reads from Event History.
        await supervisor.stop()
        survivors = await what_survives(client, handle.id)
        assert survivors.answers == {"item_opened": "Yes", "damage": "Split seam"}
        assert survivors.lookups == ["lookup_order", "lookup_customer_history"]
        assert survivors.next_action == "issue refund"
        assert survivors.refund.state == "not started"
        assert await refunds_made(stack.settings) == []

        await supervisor.start()
        await handle.signal("release")
        outcome = await asyncio.wait_for(handle.result(), 30)
        after = await _scheduled(handle)

    assert outcome.status == "refunded" and outcome.refund and outcome.refund.status == "succeeded"
    questions = [m.text for m in await conv.bot_messages() if m.kind == "question"]
    assert questions == ["Was the package opened?", "What was damaged?"]  # none asked twice
    for step in LOOP_STEPS:  # no decide step or lookup ran again, none retried
        assert after.get(step) == before.get(step), step
        assert all(attempt == 1 for attempt in after.get(step, []))
    refunds = await Ledger(database_for(stack.settings)).refunds_for_workflow(handle.id)
    assert len(refunds) == 1 and refunds[0].calls == 1


async def test_a_worker_carries_the_drill_only_when_it_is_asked_for(
    client, agent_settings, tmp_path, monkeypatch
) -> None:
    """Built as `refund-bot worker` builds it: with the default settings nothing of demo/ is in
    its interceptors; with the drill's switch on, the drill's pause is, on both Workers."""
    monkeypatch.chdir(tmp_path)  # no developer .env can turn the drill on

    async def from_demo(task_queue: str) -> list[str]:
        pair: WorkerPair = await build_worker(
            client, task_queue, agent_settings, {}, interceptors=worker_interceptors()
        )
        return [
            type(interceptor).__name__
            for worker in (pair.conversations, pair.effects)
            for interceptor in worker.config()["interceptors"]
            if type(interceptor).__module__.split(".")[0] == "demo"
        ]

    monkeypatch.delenv(DRILL, raising=False)
    production = await from_demo("production")
    monkeypatch.setenv(DRILL, "true")
    assert (production, await from_demo("drill")) == ([], ["PauseAfterEffect", "PauseAfterEffect"])


async def test_kill_after_the_ledger_accepted_makes_no_second_refund(
    temporal_env, tmp_path
) -> None:
    client = temporal_env.client
    drill = {"REFUND_DRILL_PAUSE_AFTER_EFFECT": "true"}
    async with supervised_stack(temporal_env, tmp_path, drill) as stack:
        threads = local_thread_store(stack.settings)
        ledger = Ledger(database_for(stack.settings))
        conv = LocalConversation(client, threads, stack.temporal.task_queue)
        handle = await conv.open("please refund order 1234")
        await conv.next_bot_message()
        await conv.reply("Yes")
        await conv.next_bot_message()
        await conv.reply("Split seam")
        # Attempt 1 reaches the ledger, which accepts the refund; the Activity has not completed.
        accepted = await wait_for(
            lambda: ledger.refunds_for_workflow(handle.id), timeout=30, what="the ledger's refund"
        )
        assert accepted[0].calls == 1
        survivors = await what_survives(client, handle.id)
        assert survivors.refund.state == "in flight"

        await request_worker_restart(client, stack.temporal.control_task_queue)
        outcome = await asyncio.wait_for(handle.result(), 30)

    assert outcome.status == "refunded" and outcome.refund
    assert outcome.refund.attempt == 2  # a real retry: a Temporal attempt, visible in history
    refunds = await ledger.refunds_for_workflow(handle.id)
    assert len(refunds) == 1  # one refund...
    assert refunds[0].calls == 2  # ...from two calls with one idempotency key
    assert outcome.refund.refund_id == refunds[0].refund_id == accepted[0].refund_id


async def test_twenty_conversations_under_random_kills_end_as_they_should(
    temporal_env, tmp_path
) -> None:
    """The crash drill at small scale (bench/random_kills.py runs 200): the four kinds of story
    while the Worker is SIGKILLed every 0.3-2 s; the owners' records say nothing was lost or
    done twice. The customers arrive over 8 s: all at once, twenty stories can end (in 1.4 s on
    a quiet machine) before the second kill."""
    report = await run_drill(temporal_env, tmp_path, 20, max_kills=4, seed=10, arrivals=8.0)
    assert report.kills == 4
    assert report.wrong_outcomes == []
    assert report.refund_mismatches == []
    assert report.refunds == 10  # auto-approved and escalated-then-approved: 5 each
    assert report.repeated_posts == []
    assert report.missing_messages == []

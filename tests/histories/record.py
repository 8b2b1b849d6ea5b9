"""Record the Event Histories of this code's Workflow version that tests/test_replay.py replays.

    uv run python -m tests.histories.record [name ...]      (no names: every scenario)

They go into tests/histories/, encrypted with the tests' codec key (harness/codec.py), beside the
conversations this version leaves open at every stage (`python -m harness.release record`). A
change to the Workflow's commands is a new WORKFLOW_VERSION (docs/versioning.md): first move this
version's histories into tests/histories/workflow-<its version>/, never to be recorded again
(they are the proof that the conversations it left running still replay), then record here.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import WorkflowFailureError, WorkflowHandle

from agent.models import Actor
from agent.settings import AgentSettings
from agent.stores.sqlite import SqliteDatabase
from harness.conversation import SUPPORT, LocalConversation
from harness.fakes.openai_api import Behaviour, FakeOpenAI
from harness.inproc import standalone_agent
from harness.owner import place_order
from tests.support.outcome_gate import OutcomeGate
from tests.support.silent_platform import SilentFirstPost
from worker.runner import build_worker

HERE = Path(__file__).parent
MARLOW = Actor(platform="local", user_id="marlow", display_name="Marlow")


async def _answer(conv: LocalConversation) -> None:
    await conv.next_bot_message()
    await conv.reply("Yes")
    await conv.next_bot_message()
    await conv.reply("Split seam")


async def _held_then_released(conv: LocalConversation, handle: WorkflowHandle) -> None:
    await conv.wait_phase("held_before_refund")
    await handle.signal("release")
    await handle.result()


async def auto_approved(conv: LocalConversation) -> WorkflowHandle:
    handle = await conv.open("please refund order 1234", hold=True)
    await _answer(conv)
    await _held_then_released(conv, handle)
    return handle


async def escalated(conv: LocalConversation) -> WorkflowHandle:
    handle = await conv.open("please refund order 4500", hold=True)
    await _answer(conv)
    await conv.next_bot_message()
    await conv.click("approve", SUPPORT)
    await _held_then_released(conv, handle)
    return handle


async def reoffered(conv: LocalConversation) -> WorkflowHandle:
    """Escalated; an approval and a denial from someone without a grant are each refused and the
    buttons offered again; then a support agent approves."""
    handle = await conv.open("please refund order 4500")
    await _answer(conv)
    await conv.next_bot_message()  # the escalation
    await conv.click("approve", MARLOW)
    await conv.next_bot_message()  # no refund yet: offered again
    await conv.click("deny", MARLOW)
    await conv.next_bot_message()  # can't decline: offered again
    await conv.click("approve", SUPPORT)
    await handle.result()
    return handle


async def declined(conv: LocalConversation) -> WorkflowHandle:
    handle = await conv.open("please refund order 4500")
    await _answer(conv)
    await conv.next_bot_message()
    await conv.click("deny", SUPPORT)
    await handle.result()
    return handle


async def refunded_twice(conv: LocalConversation) -> WorkflowHandle:
    """A second conversation about an order the first one refunded."""
    first = await conv.open("please refund order 1234")
    await _answer(conv)
    await first.result()
    second = LocalConversation(conv.client, conv.threads, conv.task_queue)
    handle = await second.open("please refund order 1234")  # answered at once: no question
    await handle.result()
    return handle


async def model_refused(conv: LocalConversation) -> WorkflowHandle:
    """The live model's API answers 401 (the Worker's key is wrong)."""
    handle = await conv.open("please refund order 1234", decider="openai")
    # The model is asked first (which lookups), and refuses the call: no question is asked.
    with contextlib.suppress(WorkflowFailureError):
        await handle.result()
    return handle


async def model_decided(conv: LocalConversation) -> WorkflowHandle:
    """The live model (its API's stand-in, with the Worker's right key) chooses two lookups and
    approves: its decide steps stay Activities, the lookups and the grant read are local."""
    handle = await conv.open("please refund order 1234", decider="openai")
    await _answer(conv)
    await handle.result()
    return handle


async def model_overruled(conv: LocalConversation) -> WorkflowHandle:
    """A hostile model approves the final-sale order at once, with no lookup: the Workflow runs
    the lookups itself and the refund rules turn the approval into a denial."""
    handle = await conv.open("please refund order 3003", decider="openai")
    await handle.result()
    return handle


async def raced(conv: LocalConversation) -> WorkflowHandle:
    """Two conversations on one order reach the refund together; the owner refunds once and the
    loser closes with the already-refunded answer. The loser's history is recorded."""
    other = LocalConversation(conv.client, conv.threads, conv.task_queue)
    handles = [await c.open("please refund order 1234", hold=True) for c in (conv, other)]
    for c in (conv, other):
        await _answer(c)
        await c.wait_phase("held_before_refund")
    await asyncio.gather(*(h.signal("release") for h in handles))
    outcomes = await asyncio.gather(*(h.result() for h in handles))
    return next(h for h, o in zip(handles, outcomes, strict=True) if o.status == "denied")


async def stale_click(conv: LocalConversation) -> WorkflowHandle:
    """Round 1 refused (no grant); a late click on round 1's buttons is dropped (and round 1's
    outcome said again); round 2's approval refunds."""
    handle = await conv.open("please refund order 4500")
    await _answer(conv)
    await conv.next_bot_message()
    await conv.click("approve", MARLOW, round=1)
    await conv.next_bot_message()  # round 2
    await conv.click("approve", SUPPORT, round=1)
    await conv.click("approve", SUPPORT, round=2)
    await handle.result()
    return handle


def _data_dir(conv: LocalConversation) -> Path:
    """The conversation's data directory: standalone_agent's stores are SQLite files in it."""
    database = conv.threads.database
    assert isinstance(database, SqliteDatabase)
    return database.directory


async def refund_failed(conv: LocalConversation) -> WorkflowHandle:
    """The owner refuses the refund (a payment it never saw): one plain sentence in the thread."""
    data_dir = _data_dir(conv)
    settings = AgentSettings(_env_file=None, data_dir=data_dir)
    await place_order(settings, "6060", paid=False)
    handle = await conv.open("please refund order 6060")
    await _answer(conv)
    await handle.result()
    return handle


async def late_message(conv: LocalConversation) -> WorkflowHandle:
    """The customer writes "thanks!" while the outcome is being posted: the conversation answers
    that it has finished (its own Worker, whose outcome post waits for that message)."""
    data_dir = _data_dir(conv)
    settings = AgentSettings(_env_file=None, data_dir=data_dir)
    gate = OutcomeGate(conv.threads)
    queue = conv.task_queue + "-gated"
    async with await build_worker(conv.client, queue, settings, {"local": gate}):
        gated = LocalConversation(conv.client, conv.threads, queue)
        handle = await gated.open("please refund order 9999")  # no such order: denied at once
        await asyncio.wait_for(gate.reached.wait(), 30)
        await gated.reply("thanks!")
        gate.open.set()
        await asyncio.wait_for(handle.result(), 30)
    return handle


async def answered_by_update(conv: LocalConversation) -> WorkflowHandle:
    """The answers as the router sends them: each an Update a Worker accepts. The first comes a
    second time as its Signal (the router's fallback when no Worker accepted the Update in time),
    and is taken once."""
    handle = await conv.open("please refund order 1234", hold=True)
    await conv.next_bot_message()
    first = await conv.reply("Yes", update=True)
    await conv.reply("Yes", message_id=first)
    await conv.next_bot_message()
    await conv.reply("Split seam", update=True)
    await _held_then_released(conv, handle)
    return handle


async def post_timed_out(conv: LocalConversation) -> WorkflowHandle:
    """The platform does not answer the escalation's post: its local try times out (a marker
    holding the timeout) and the regular Activity posts it; a support agent approves and the
    conversation refunds (its own Worker, whose platform is silent for that post)."""
    data_dir = _data_dir(conv)
    settings = AgentSettings(_env_file=None, data_dir=data_dir)
    queue = conv.task_queue + "-silent"
    platform = SilentFirstPost(conv.threads, kind="escalation")
    async with await build_worker(conv.client, queue, settings, {"local": platform}):
        silent = LocalConversation(conv.client, conv.threads, queue)
        handle = await silent.open("please refund order 4500")
        await silent.answer_the_questions()
        await silent.next_bot_message(timeout=30)
        await silent.click("approve", SUPPORT)
        await asyncio.wait_for(handle.result(), 30)
    return handle


SCENARIOS: dict[str, Callable[[LocalConversation], Awaitable[WorkflowHandle]]] = {
    "auto_approved": auto_approved,
    "escalated": escalated,
    "reoffered": reoffered,
    "declined": declined,
    "refunded_twice": refunded_twice,
    "model_refused": model_refused,
    "model_decided": model_decided,
    "model_overruled": model_overruled,
    "raced": raced,
    "stale_click": stale_click,
    "refund_failed": refund_failed,
    "late_message": late_message,
    "answered_by_update": answered_by_update,
    "post_timed_out": post_timed_out,
}


# The Worker's OpenAI key in each scenario: the fake answers 401 to any other than its own.
RIGHT_KEY = "sk-the-right-key"
WORKER_KEYS = {"model_decided": RIGHT_KEY, "model_overruled": RIGHT_KEY}
# How the model behaves in each scenario (harness/fakes/openai_api.py); cooperative elsewhere.
MODEL_BEHAVIOURS: dict[str, Behaviour] = {"model_overruled": "approve_at_once"}


async def record(names: list[str]) -> None:
    async with FakeOpenAI(api_key=RIGHT_KEY) as model:
        for name in names:
            model.behaviour = MODEL_BEHAVIOURS.get(name, "scripted")
            overrides = {
                "openai_api_key": WORKER_KEYS.get(name, "sk-a-revoked-key"),
                "openai_base_url": model.api_url,
            }
            # A fresh data directory each: a refund one scenario makes is the next one's history.
            async with standalone_agent(overrides) as (client, threads, tq, _):
                handle = await SCENARIOS[name](LocalConversation(client, threads, tq))
                history = await handle.fetch_history()
            (HERE / f"{name}.json").write_text(history.to_json())
            print(f"recorded {name}.json ({len(history.events)} events)")


if __name__ == "__main__":
    asyncio.run(record(sys.argv[1:] or list(SCENARIOS)))

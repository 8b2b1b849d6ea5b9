"""A human can take over: the agent says so once and stays quiet, the customer's messages stay in
the thread for the person, and on hand-back the agent carries on with what they wrote meanwhile.
An approver can still decide while it is taken over. Recorded in Event History: /refund-status
reads it with no Worker alive."""

from __future__ import annotations

import asyncio

from agent.history import what_survives
from agent.models import Takeover
from agent.sayings import HANDED_BACK, taken_over
from agent.workflow import RefundConversation
from harness.conditions import wait_for
from harness.conversation import SUPPORT, LocalConversation
from harness.inproc import running_worker
from harness.owner import refunds_made


async def _take(conv: LocalConversation, taken: bool) -> None:
    assert conv.handle is not None
    await conv.handle.signal(RefundConversation.takeover, Takeover(actor=SUPPORT, taken=taken))


async def test_a_person_takes_over_and_hands_back_without_a_question_asked_twice(
    client, agent_settings, threads
) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 1234")
        assert (await conv.next_bot_message()).text == "Was the package opened?"
        await _take(conv, True)
        assert (await conv.next_bot_message()).text == taken_over(SUPPORT.label)
        # The customer talks to the person; the agent neither answers nor takes it as an answer.
        await conv.reply("I opened it and the seam is split")
        await conv.reply("can you help?")
        view = await wait_for(
            lambda: _view_if(conv, lambda v: v.taken_over_by is not None), what="taken over"
        )
        assert view.taken_over_by == SUPPORT and view.answers == {}
        survivors = await what_survives(client, handle.id)
        assert survivors.taken_over and survivors.taken_over.startswith(f"{SUPPORT.label} since")
        assert survivors.next_action.startswith(f"wait for {SUPPORT.label} to hand")

        await _take(conv, False)
        assert (await conv.next_bot_message()).text == HANDED_BACK
        # What the customer wrote meanwhile answers the question it was waiting for, and says
        # what was damaged: nothing is asked again, and the refund goes ahead.
        outcome = await asyncio.wait_for(handle.result(), 30)
    assert outcome.status == "refunded"
    said = [m.text for m in await conv.bot_messages()]
    assert said.count("Was the package opened?") == 1 and "What was damaged?" not in said
    assert said.count(taken_over(SUPPORT.label)) == 1
    assert len(await refunds_made(agent_settings)) == 1


async def test_an_approver_still_decides_while_it_is_taken_over(
    client, agent_settings, threads
) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 4500")
        escalation = await conv.answer_until_decided()
        assert escalation.kind == "escalation"
        await _take(conv, True)
        await conv.next_bot_message()  # "... has taken over this conversation ..."
        await _take(conv, True)  # a second takeover changes nothing, says nothing
        await conv.click("approve", SUPPORT, round=1)
        outcome = await asyncio.wait_for(handle.result(), 30)
    assert outcome.status == "refunded"
    said = [m.text for m in await conv.bot_messages()]
    assert said.count(taken_over(SUPPORT.label)) == 1
    assert said[-1].startswith("Your refund is complete")


async def _view_if(conv: LocalConversation, ok):
    view = await conv.view()
    return view if ok(view) else None

"""Time, said in the thread: a silent customer is reminded once, then the request is closed; an
escalation tells who decides and how long that takes, reminds the approvers once, then closes; the
presenter's hold ends. Each on the real dev server, with Timing in seconds; /refund-status reads
the next deadline with no Worker alive."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from agent.history import what_survives
from agent.models import Takeover, Timing
from agent.sayings import HANDED_BACK, HOLD_RAN_OUT, NO_DECISION, NOT_HEARD_BACK, taken_over
from agent.visibility import escalations_waiting
from agent.workflow import RefundConversation
from bot.local.thread_store import APPROVERS_MENTION
from harness.conditions import wait_for
from harness.conversation import SUPPORT, LocalConversation
from harness.inproc import running_worker
from harness.owner import refunds_made

SECONDS = Timing(
    customer_reminder=timedelta(seconds=2),
    customer_idle=timedelta(seconds=5),
    approval_reminder=timedelta(seconds=2),
    approval_timeout=timedelta(seconds=5),
    hold_timeout=timedelta(seconds=2),
)


async def test_a_silent_customer_is_reminded_once_then_the_request_is_closed(
    client, agent_settings, threads
) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 1234", timing=SECONDS)
        question = await conv.next_bot_message()
        assert question.text == "Was the package opened?"
        survivors = await what_survives(client, handle.id)
        assert survivors.next_deadline and survivors.next_deadline.startswith(
            "remind the customer at"
        )
        reminder = await conv.next_bot_message(timeout=20)
        assert reminder.text == (
            "Just checking in: Was the package opened? I'll keep this request open for "
            "3 seconds more."
        )
        outcome = await asyncio.wait_for(handle.result(), 30)
    assert outcome.status == "expired" and outcome.message == NOT_HEARD_BACK
    said = [m.text for m in await conv.bot_messages()]
    assert said == [question.text, reminder.text, NOT_HEARD_BACK]


async def test_an_answer_after_the_reminder_carries_on_without_asking_again(
    client, agent_settings, threads
) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 1234", timing=SECONDS)
        await conv.next_bot_message()
        await conv.next_bot_message(timeout=20)  # the reminder
        await conv.reply("Yes")
        assert (await conv.next_bot_message()).text == "What was damaged?"
        await conv.reply("Split seam")
        outcome = await asyncio.wait_for(handle.result(), 30)
    assert outcome.status == "refunded"
    asked = [m.text for m in await conv.bot_messages() if m.kind == "question"]
    assert asked == ["Was the package opened?", "What was damaged?"]


async def test_an_undecided_escalation_reminds_the_approvers_once_then_closes(
    client, agent_settings, threads
) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 4500", timing=SECONDS)
        escalation = await conv.answer_until_decided()
        assert escalation.kind == "escalation"
        assert "A support agent decides; that usually takes under 2 seconds." in escalation.text

        async def queued() -> list:
            # Visibility is written after the workflow task that posted the escalation completes:
            # the thread can show the message a moment before the queue lists it.
            return [w for w in await escalations_waiting(client) if w.workflow_id == handle.id]

        listed = await wait_for(queued, timeout=10, what="the escalation in the queue")
        assert [(w.order, w.amount_cents, w.reminded) for w in listed] == [("4500", 45000, False)]
        reminder = await conv.next_bot_message(timeout=20)
        # The terminal's outbound half names the support agents in the reminder, and only there.
        assert reminder.text.startswith(
            f"{APPROVERS_MENTION} Reminder for the refund approvers: order 4500 ($450.00) has "
            "waited"
        )
        outcome = await asyncio.wait_for(handle.result(), 30)
    assert outcome.status == "expired" and outcome.message == NO_DECISION
    said = [m.text for m in await conv.bot_messages()]
    assert said[-1] == NO_DECISION
    assert [t for t in said if APPROVERS_MENTION in t] == [reminder.text]
    assert await refunds_made(agent_settings) == []


async def test_the_hold_before_the_refund_ends_and_no_refund_is_made(
    client, agent_settings, threads
) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 1234", hold=True, timing=SECONDS)
        await conv.answer_until_decided()  # "Holding before the refund ..."
        outcome = await asyncio.wait_for(handle.result(), 30)
    assert outcome.status == "expired" and outcome.message == HOLD_RAN_OUT
    assert await refunds_made(agent_settings) == []


async def test_a_held_escalation_waits_silently_until_it_is_handed_back(
    client, agent_settings, threads
) -> None:
    """While a person holds the conversation the agent neither reminds the approvers nor closes
    the escalation: its clock stops (read from history: no timer but the age limit runs), and
    starts again at the hand-back."""
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 4500", timing=SECONDS)
        assert (await conv.answer_until_decided()).kind == "escalation"
        await handle.signal(RefundConversation.takeover, Takeover(actor=SUPPORT, taken=True))
        assert (await conv.next_bot_message()).text == taken_over(SUPPORT.label)

        async def held() -> str | None:
            deadline = (await what_survives(client, handle.id)).next_deadline or ""
            return deadline if deadline.startswith("close: the conversation's age limit") else None

        await wait_for(held, what="the escalation's clock stopped")
        await handle.signal(RefundConversation.takeover, Takeover(actor=SUPPORT, taken=False))
        assert (await conv.next_bot_message()).text == HANDED_BACK
        reminder = await conv.next_bot_message(timeout=20)
        assert "Reminder for the refund approvers" in reminder.text
        outcome = await asyncio.wait_for(handle.result(), 30)
    assert outcome.status == "expired" and outcome.message == NO_DECISION

"""A human can take over: the agent says so once and stays quiet, the customer's messages stay in
the thread for the person, and on hand-back the agent carries on with what they wrote meanwhile.
An approver can still decide while it is taken over. Recorded in Event History: /refund-status
reads it with no Worker alive. And the support team's way in, end to end in the terminal channel:
/refund-queue lists the escalation, /refund-takeover and /refund-handback."""

from __future__ import annotations

import asyncio
import io
import random
import re
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from agent.history import what_survives
from agent.models import Takeover
from agent.sayings import HANDED_BACK, taken_over
from agent.workflow import RefundConversation
from bot.local import thread_store
from bot.local.terminal import PEOPLE, LocalChannel
from harness.conditions import wait_for
from harness.conversation import SUPPORT, LocalConversation
from harness.inproc import running_worker
from harness.owner import refunds_made
from harness.stack import supervised_stack
from refund_bot.wiring import local_thread_store


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


async def test_a_support_agent_works_the_queue_takes_over_and_hands_back_in_the_terminal(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with supervised_stack(temporal_env, tmp_path) as stack:
        threads = local_thread_store(stack.settings)
        # Threads are named t1, t2, … per data directory, and Workflow IDs after them: a name of
        # its own, so no other test's conversation on the session's server has this one's ID.
        async with threads.database.connect(thread_store.SCHEMA) as db:
            await db.execute(
                "INSERT INTO threads (thread_id, channel, opened_by, opened_at) "
                "VALUES (?, ?, ?, ?)",
                f"t{random.randrange(10**6, 10**9)}",
                "support",
                "nobody",
                "2026-01-01",
            )
        out = io.StringIO()
        channel = LocalChannel(threads, stack.router, stack.commands, out=out)
        shown = 0

        async def printed(pattern: str, timeout: float = 30) -> str:
            """The next line the terminal prints (after the last one read) matching `pattern`."""

            async def probe() -> str | None:
                nonlocal shown
                await channel.show_new()  # the terminal's own tail
                lines = out.getvalue().splitlines()
                for number, line in enumerate(lines[shown:], start=shown):
                    if re.search(pattern, line):
                        shown = number + 1
                        return line
                return None

            line = await wait_for(probe, timeout=timeout, what=f"a line matching {pattern!r}")
            assert line is not None  # wait_for returns the probe's first truthy answer
            return line

        # A customer's request escalates.
        await channel.handle("please refund order 4500")
        assert channel.thread is not None
        thread, workflow_id = channel.thread, f"local-local-support-{channel.thread}"
        await printed(rf"\[{thread}\] refund-bot: Was the package opened\?")
        await channel.handle("Yes")
        await printed(rf"\[{thread}\] refund-bot: What was damaged\?")
        await channel.handle("The handle snapped off")
        await printed(rf"\[{thread}\] refund-bot: This refund needs a support agent: order 4500")

        # The support agent finds it in the queue, with where its thread is.
        channel.me = PEOPLE["support"]

        async def queued() -> str | None:
            await channel.handle("/refund-queue")
            line = "order 4500 ($450.00), waiting"
            found = [
                x for x in out.getvalue().splitlines() if line in x and f"thread {thread}" in x
            ]
            return found[-1] if found else None

        entry = await wait_for(queued, timeout=30, interval=0.5, what="the escalation queued")
        assert entry is not None and entry.endswith(f"not reminded yet: thread {thread}")

        # Taken over: the agent says so once, and answers the customer no more.
        await channel.handle("/refund-takeover")
        await printed(rf"\(only you can see this\) You have taken over {workflow_id}")
        await printed(
            rf"\[{thread}\] refund-bot: Sam \(support agent\) from our support team has taken "
            "over this conversation"
        )
        channel.me = PEOPLE["customer"]
        await channel.handle("Hello? Is anyone deciding this?")
        status = await stack.commands.refund_status(PEOPLE["support"], workflow_id)
        assert "taken over by Sam (support agent)" in status.text, status.text
        quiet_from = shown  # the agent says nothing in the thread from here ...

        # Handed back: the agent is back, and the refund goes ahead on the support agent's click.
        channel.me = PEOPLE["support"]
        await channel.handle("/refund-handback")
        await printed(rf"\(only you can see this\) Handed {workflow_id} back to the agent")
        await printed(rf"\[{thread}\] refund-bot: {re.escape(HANDED_BACK)}")
        # ... until it says it is back: an answer to the customer's message, given while it was
        # taken over, would be in the thread before that.
        meanwhile = out.getvalue().splitlines()[quiet_from : shown - 1]
        assert not [line for line in meanwhile if "refund-bot:" in line], meanwhile
        await channel.handle("1")  # Approve
        await printed(rf"\[{thread}\] refund-bot: Your refund is complete: \$450\.00")

        async def off_the_queue() -> bool:
            await channel.handle("/refund-queue")
            return f"thread {thread}" not in out.getvalue().splitlines()[-1]

        await wait_for(off_the_queue, timeout=30, interval=0.5, what="the escalation off the queue")
    said = [m.text for m in await threads.messages(thread) if m.author_is_bot]
    assert said.count(taken_over(PEOPLE["support"].label)) == 1 and said.count(HANDED_BACK) == 1
    assert len(await refunds_made(stack.settings)) == 1

"""Approvals are bound to the escalation round they answer, and each round's message ends up saying
what became of it. A real Temporal dev server, an in-process Worker, the local platform.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.models import Actor, MessageEdit, MessageKey, OutboundMessage
from agent.settings import AgentSettings
from agent.stores.database import database_for
from agent.stores.sqlite import SqliteDatabase
from bot.conversations import ConversationRouter, InboundClick, Routed
from bot.ids import workflow_id_for
from bot.inbox import Inbox
from bot.local import thread_store
from bot.local.terminal import LocalChannel, thread_ref
from bot.local.thread_store import LocalMessage, LocalThreadStore
from harness.conditions import wait_for
from harness.conversation import SUPPORT, LocalConversation
from harness.inproc import running_worker
from harness.owner import refunds_made

MARLOW = Actor(platform="local", user_id="marlow", display_name="Marlow")
NO_GRANT = "Marlow holds no live refund_approver grant"


@pytest.fixture
def threads(agent_settings: AgentSettings) -> LocalThreadStore:
    return LocalThreadStore(database_for(agent_settings))


async def _escalated(conv: LocalConversation) -> LocalMessage:
    await conv.open("refund order 4500")
    for answer in ("Yes", "Split seam"):
        await conv.next_bot_message()
        await conv.reply(answer)
    escalation = await conv.next_bot_message()
    assert escalation.kind == "escalation" and escalation.round == 1
    return escalation


async def _escalations(conv: LocalConversation) -> list[LocalMessage]:
    return [m for m in await conv.bot_messages() if m.kind == "escalation"]


async def test_a_click_on_an_earlier_rounds_buttons_is_dropped(
    client, agent_settings, threads
) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        await _escalated(conv)
        await conv.click("approve", MARLOW, round=1)  # refused: no grant; round 2 is posted
        offered = await conv.next_bot_message()
        assert NO_GRANT in offered.text and offered.round == 2
        # Sam clicks round 1's buttons (still on an old screen), then Deny on round 2's. If the
        # stale Approve were taken, the refund would go through.
        await conv.click("approve", SUPPORT, round=1)
        await conv.click("deny", SUPPORT, round=2)
        assert conv.handle is not None
        outcome = await conv.handle.result()
    assert outcome.status == "declined"
    assert await refunds_made(agent_settings) == []


@pytest.mark.parametrize("round", [1, None], ids=["buttons-with-round", "buttons-from-before"])
async def test_a_second_click_queued_while_the_first_is_checked_is_not_taken_later(
    client, agent_settings, threads, round: int | None
) -> None:
    """Two clicks on round 1 arrive together (queued while the Worker is away, so the order is
    certain): Marlow's is taken and refused, round 2 opens, and Sam's round-1 click is not taken
    by round 2, with or without a round in the buttons (older buttons: bound at arrival)."""
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        await _escalated(conv)
        await conv.wait_phase("waiting_for_approval")
    await conv.click("approve", MARLOW, round=round)
    await conv.click("approve", SUPPORT, round=round)
    async with running_worker(client, agent_settings, threads, task_queue=tq):
        offered = await conv.next_bot_message()
        assert NO_GRANT in offered.text and offered.round == 2
        view = await conv.wait_phase("waiting_for_approval")
        assert view.escalation_round == 2 and view.refund is None
        await conv.click("deny", SUPPORT, round=2)
        assert conv.handle is not None
        outcome = await conv.handle.result()
    assert outcome.status == "declined"
    assert await refunds_made(agent_settings) == []


async def test_each_round_is_replaced_by_what_happened(client, agent_settings, threads) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        await _escalated(conv)
        await conv.click("approve", MARLOW, round=1)
        await conv.next_bot_message()
        await conv.click("deny", MARLOW, round=2)
        assert "can't decline" in (await conv.next_bot_message()).text
        await conv.click("approve", SUPPORT, round=3)
        assert conv.handle is not None
        outcome = await conv.handle.result()
    assert outcome.refund is not None
    first, second, third = await _escalations(conv)
    assert first.text.endswith(f"\nApproved by Marlow: not counted ({NO_GRANT}).")
    assert second.text.endswith(f"\nDenied by Marlow: not counted ({NO_GRANT}).")
    assert third.text.endswith(
        f"\nApproved by Sam (support): refund issued ($450.00, reference "
        f"{outcome.refund.refund_id})."
    )
    assert first.text.startswith("This refund needs a support agent: order 4500")
    assert [m.actions for m in (first, second, third)] == [[], [], []]


async def test_a_decline_is_said_on_the_escalation(client, agent_settings, threads) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        await _escalated(conv)
        await conv.click("deny", SUPPORT, round=1)
        assert conv.handle is not None
        assert (await conv.handle.result()).status == "declined"
    (escalation,) = await _escalations(conv)
    assert escalation.text.endswith("\nDenied by Sam (support): refund declined.")


async def test_a_late_click_that_overwrote_an_outcome_gets_it_back(
    client, agent_settings, threads
) -> None:
    """A stale click's adapter writes "checking authorization" before its Signal arrives; when
    the Workflow drops the click it says the round's outcome again."""
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        first = await _escalated(conv)
        await conv.click("approve", MARLOW, round=1)
        await conv.next_bot_message()  # round 2

        async def settled() -> str | None:
            (row, *_) = await _escalations(conv)
            return row.text if row.text != first.text else None

        outcome_text = await wait_for(settled, what="round 1 settled")
        async with threads.database.connect(thread_store.SCHEMA) as db:  # as an adapter would
            await db.execute(
                "UPDATE messages SET text = ? WHERE seq = ?",
                f"{first.text}\nApproved by Sam, checking authorization",
                first.seq,
            )
        await conv.click("approve", SUPPORT, round=1)

        async def restored() -> bool:
            (row, *_) = await _escalations(conv)
            return row.text == outcome_text

        await wait_for(restored, what="round 1's outcome said again")
        assert (await conv.view()).escalation_round == 2


async def test_the_router_checks_a_click_against_the_open_round(
    client, agent_settings, threads, tmp_path: Path
) -> None:
    async def no_hold() -> bool:
        return False

    async with running_worker(client, agent_settings, threads) as tq:
        router = ConversationRouter(client, tq, Inbox(SqliteDatabase(tmp_path)), no_hold)
        conv = LocalConversation(client, threads, tq)
        await _escalated(conv)
        assert conv.handle is not None

        def click(round: int | None, workflow_id: str = conv.handle.id) -> InboundClick:
            return InboundClick(
                event_id=f"e{round}",
                workflow_id=workflow_id,
                decision="deny",
                actor=SUPPORT,
                click_id=f"c{round}",
                round=round,
            )

        await conv.wait_phase("waiting_for_approval")
        assert await router.check_click(click(1)) is None
        assert await router.check_click(click(None)) is None  # older buttons: the Workflow binds
        assert await router.check_click(click(7)) == Routed.STALE
        assert await router.check_click(click(1, "local-no-such-thread")) is None
        assert await router.on_click(click(1)) == Routed.SIGNALLED
        await conv.handle.result()
        assert await router.check_click(click(1)) == Routed.CLOSED


# -- the terminal's numbered choice ------------------------------------------------------------


@dataclass
class RecordingRouter:
    check_result: Routed | None = None
    clicks: list[InboundClick] = field(default_factory=list)

    async def check_click(self, click: InboundClick) -> Routed | None:
        return self.check_result

    async def on_click(self, click: InboundClick) -> Routed:
        self.clicks.append(click)
        return Routed.SIGNALLED


async def test_the_terminals_choice_answers_the_round_it_showed(threads) -> None:
    root = await threads.open_thread("support", "customer", "refund order 4500")
    wid = workflow_id_for(thread_ref(root.thread_id))
    escalation = OutboundMessage(
        thread=thread_ref(root.thread_id),
        key=MessageKey(workflow_id=wid, run_id="r", seq=3),
        kind="escalation",
        text="No refund yet: Marlow holds no live refund_approver grant.",
        actions=["approve", "deny"],
        round=2,
    )
    await threads.post(escalation)
    router = RecordingRouter()
    out = io.StringIO()
    channel = LocalChannel(threads, router, commands=None, out=out)  # type: ignore[arg-type]
    await channel.show_new()
    await channel.handle("/as support")
    await channel.handle(f"/thread {root.thread_id}")
    await channel.handle("1")
    (click,) = router.clicks
    assert (click.workflow_id, click.decision, click.round) == (wid, "approve", 2)

    router.check_result = Routed.STALE
    await channel.handle("2")
    assert len(router.clicks) == 1  # not sent
    assert "already answered" in out.getvalue()

    # The Workflow's edit of the escalation is shown, marked as an edit.
    await threads.edit(
        MessageEdit(
            thread=escalation.thread,
            key=escalation.key,
            platform_message_id="local-2",
            text=escalation.text,
            outcome="refund issued ($450.00, reference re_x).",
            decision="approve",
            decided_by=SUPPORT,
        )
    )
    await channel.show_new()
    assert (
        out.getvalue()
        .rstrip()
        .endswith(
            "refund-bot (edited): No refund yet: Marlow holds no live refund_approver grant.\n"
            "Approved by Sam (support): refund issued ($450.00, reference re_x)."
        )
    )

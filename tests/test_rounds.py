"""Approvals are bound to the escalation round they answer, and each round's message ends up saying
what became of it. A real Temporal dev server, an in-process Worker, the local platform.
"""

from __future__ import annotations

import inspect
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from temporalio.client import Client, Interceptor, OutboundInterceptor

from agent.models import Actor, MessageEdit, MessageKey, OutboundMessage
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from agent.stores.sqlite import SqliteDatabase
from bot.clicks import approver_check, on_click
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
from harness.recording_router import RecordingRouter

MARLOW = Actor(platform="local", user_id="marlow", display_name="Marlow")
NO_GRANT = "Marlow holds no live refund_approver grant"


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


class CountingInterceptor(Interceptor):
    """Counts every call the client makes to Temporal, by name."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self.calls)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, calls: list[str]) -> None:
        super().__init__(next)
        self._calls = calls


def _counted(name: str) -> Any:
    async def call(self: _Counting, input: Any) -> Any:
        self._calls.append(name)
        return await getattr(self.next, name)(input)

    return call


for _name, _method in vars(OutboundInterceptor).items():
    if inspect.iscoroutinefunction(_method):
        setattr(_Counting, _name, _counted(_name))


@dataclass
class OverwritingSurface:
    """A platform's surface over the local store: "checking authorization" is written over the
    clicked message, as Slack and Discord write it over theirs."""

    threads: LocalThreadStore
    message: LocalMessage
    told: list[str] = field(default_factory=list)
    approval_needs: str = "the refund_approver role"

    async def tell(self, text: str) -> None:
        self.told.append(text)

    async def checking(self) -> None:
        async with self.threads.database.connect(thread_store.SCHEMA) as db:
            await db.execute(
                "UPDATE messages SET text = ? WHERE seq = ?",
                f"{self.message.text}\nApproved by Sam, checking authorization",
                self.message.seq,
            )

    async def restore(self) -> None:
        raise AssertionError("the click was routed")

    async def conclude(self, outcome: str) -> None:
        raise AssertionError(f"no final line expected, got {outcome!r}")


async def test_a_click_costs_one_call_to_temporal_and_a_stale_one_is_answered_by_the_workflow(
    client: Client, agent_settings, threads, tmp_path: Path
) -> None:
    """Nothing asks the Workflow whether a click's round is still open: each click is one Signal.
    A click on a round that has passed is sent all the same; the Workflow drops it, says that
    round's outcome again over the adapter's "checking authorization", and refunds nothing."""

    async def no_hold() -> bool:
        return False

    counting = CountingInterceptor()
    config = client.config()
    config["interceptors"] = [*config["interceptors"], counting]
    counted = Client(**config)
    may_approve = approver_check(GrantStore(database_for(agent_settings)))
    async with running_worker(client, agent_settings, threads) as tq:
        router = ConversationRouter(counted, tq, Inbox(SqliteDatabase(tmp_path)), no_hold)
        conv = LocalConversation(client, threads, tq)
        first = await _escalated(conv)
        await conv.click("approve", MARLOW, round=1)  # refused: no grant; round 2 is posted
        assert (await conv.next_bot_message()).round == 2

        async def settled() -> str | None:
            (row, *_) = await _escalations(conv)
            return row.text if row.text != first.text else None

        outcome_text = await wait_for(settled, what="round 1 settled")
        assert conv.handle is not None
        workflow_id = conv.handle.id

        def click(decision: Literal["approve", "deny"], round: int) -> InboundClick:
            return InboundClick(
                event_id=f"e-{decision}-{round}",
                workflow_id=workflow_id,
                decision=decision,
                actor=SUPPORT,
                click_id=f"c-{decision}-{round}",
                round=round,
            )

        # Sam approves on round 1's buttons, still on an old screen.
        stale = OverwritingSurface(threads, first)
        assert await on_click(click("approve", 1), may_approve, router, stale) == Routed.SIGNALLED
        assert counting.calls == ["signal_workflow"]
        assert stale.told == []  # the thread says it: round 1's outcome, again

        async def restored() -> bool:
            (row, *_) = await _escalations(conv)
            return row.text == outcome_text

        await wait_for(restored, what="round 1's outcome said again")
        view = await conv.view()
        assert view.escalation_round == 2 and view.refund is None

        # A click on the open round is one Signal too.
        (_, current) = await _escalations(conv)
        fresh = OverwritingSurface(threads, current)
        assert await on_click(click("deny", 2), may_approve, router, fresh) == Routed.SIGNALLED
        assert counting.calls == ["signal_workflow", "signal_workflow"]
        outcome = await conv.handle.result()
    assert outcome.status == "declined"
    assert await refunds_made(agent_settings) == []


# -- the terminal's numbered choice ------------------------------------------------------------


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
    grants = GrantStore(threads.database)
    await grants.seed()  # the terminal's support agent may approve; Marlow may not
    # No command is run here: commands=None fails loudly if one ever is.
    channel = LocalChannel(threads, router, commands=None, out=out, grants=grants)  # type: ignore[arg-type]
    await channel.show_new()
    await channel.handle("/as support")
    await channel.handle(f"/thread {root.thread_id}")
    await channel.handle("1")
    (click,) = router.clicks
    assert (click.workflow_id, click.decision, click.round) == (wid, "approve", 2)
    assert f"[{root.thread_id}] Approved by Sam (support agent), checking authorization" in (
        out.getvalue()
    )

    # A second choice on the same round is sent too, one Signal like the first: the Workflow,
    # not the terminal, drops a click whose round has passed and says the round's outcome again.
    await channel.handle("2")
    assert [(c.decision, c.round) for c in router.clicks] == [("approve", 2), ("deny", 2)]

    # Someone who holds no refund_approver grant is refused before anything is sent.
    await channel.handle("/as marlow")
    await channel.handle("1")
    assert len(router.clicks) == 2
    assert (
        "(only you can see this) Sorry Marlow (another customer), approving or denying a refund "
        "needs the refund_approver role, and you don't hold it. Nothing changed."
    ) in out.getvalue()

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

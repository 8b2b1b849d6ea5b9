"""The conversation router with a mocked Temporal client (the network edge), real SQLite inbox."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agent.models import Actor, ConversationStart, ThreadRef
from agent.stores.sqlite import SqliteDatabase
from bot.conversations import (
    MAX_SIGNAL_TEXT,
    ConversationRouter,
    InboundClick,
    InboundMessage,
    Kept,
    Routed,
    UnreadableEvent,
    keep_unreadable,
)
from bot.dedup import RecentEvents
from bot.ids import workflow_id_for
from bot.inbox import Inbox
from bot.reconnect import Backoff
from harness.conditions import wait_for

CUSTOMER = Actor(platform="slack", user_id="U0CUSTOMER", display_name="Nyghtowl")
THREAD = ThreadRef(platform="slack", workspace="T1", channel="C2", thread="1732860000.000100")


def _unavailable() -> RPCError:
    return RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b"")


@dataclass
class FakeTemporal:
    """Records what the router asks of Temporal; can be 'down' or hold finished workflows."""

    calls: list[tuple[str, str, str, Any]] = field(default_factory=list)
    down: bool = False
    finished: set[str] = field(default_factory=set)
    started: set[str] = field(default_factory=set)
    failing: dict[str, BaseException] = field(default_factory=dict)  # workflow id -> raised
    attempts: list[str] = field(default_factory=list)  # workflow ids, every call made
    # A Worker polls: a message's Update is accepted. Without one it is never accepted, and the
    # router's wait for it ends (the SDK's error for an RPC that timed out).
    worker: bool = True
    refuse_updates: bool = False  # a Worker without the Update's handler rejects it
    update_error: BaseException | None = None  # what the Update alone is answered

    async def start_workflow(self, _run: Any, start: Any, **kwargs: Any) -> SimpleNamespace:
        self.attempts.append(kwargs["id"])
        if self.down:
            raise _unavailable()
        if kwargs["id"] in self.failing:
            raise self.failing[kwargs["id"]]
        assert kwargs["id_reuse_policy"] == WorkflowIDReusePolicy.REJECT_DUPLICATE
        if kwargs["id"] in self.finished:  # what REJECT_DUPLICATE does for a closed Workflow ID
            raise WorkflowAlreadyStartedError(kwargs["id"], "RefundConversation")
        self.calls.append(("start", kwargs["id"], kwargs["start_signal"], (start, kwargs)))
        new = kwargs["id"] not in self.started
        self.started.add(kwargs["id"])
        # Temporal's answer (signal-with-start): whether this call started the run.
        return SimpleNamespace(_start_workflow_response=SimpleNamespace(started=new))

    def get_workflow_handle(self, workflow_id: str) -> Any:
        async def signal(method: Callable[..., None], arg: Any, rpc_timeout: Any = None) -> None:
            name = method.__name__  # the router names a signal by its method
            self.attempts.append(workflow_id)
            if self.down:
                raise _unavailable()
            if workflow_id in self.failing:
                raise self.failing[workflow_id]
            if workflow_id in self.finished or workflow_id not in self.started:
                raise RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b"")
            self.calls.append(("signal", workflow_id, name, arg))

        async def describe(rpc_timeout: Any = None) -> Any:
            if workflow_id not in self.started:
                raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")
            return SimpleNamespace(status=WorkflowExecutionStatus.COMPLETED)

        async def start_update(
            method: Callable[..., None], arg: Any, *, id: str, wait_for_stage: Any, rpc_timeout: Any
        ) -> None:
            assert wait_for_stage == WorkflowUpdateStage.ACCEPTED
            assert id == f"message-{arg.message_id}"  # a retried message attaches to its Update
            self.attempts.append(workflow_id)
            if self.down:
                raise _unavailable()
            if workflow_id in self.failing:
                raise self.failing[workflow_id]
            if workflow_id in self.finished or workflow_id not in self.started:
                raise RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b"")
            if self.update_error is not None:
                raise self.update_error
            if not self.worker:
                raise WorkflowUpdateRPCTimeoutOrCancelledError()
            if self.refuse_updates:
                raise WorkflowUpdateFailedError(ApplicationError("unknown update"))
            self.calls.append(("update", workflow_id, method.__name__, arg))

        return SimpleNamespace(signal=signal, describe=describe, start_update=start_update)


@pytest.fixture
def temporal() -> FakeTemporal:
    return FakeTemporal()


@pytest.fixture
def router(temporal: FakeTemporal, tmp_path) -> ConversationRouter:
    async def hold() -> bool:
        return True

    # FakeTemporal stands in for temporalio's Client: the calls the router makes.
    return ConversationRouter(temporal, "refund-bot", Inbox(SqliteDatabase(tmp_path)), hold)  # type: ignore[arg-type]


def message(event_id: str, text: str = "Yes", *, opens: bool = False, **kw: Any) -> InboundMessage:
    return InboundMessage(
        event_id=event_id,
        thread=kw.pop("thread", THREAD),
        message_id=f"m-{event_id}",
        author=kw.pop("author", CUSTOMER),
        text=text,
        opens_thread=opens,
        **kw,
    )


def test_workflow_ids_are_derived_safe_and_distinct() -> None:
    assert workflow_id_for(THREAD) == "slack-T1-C2-1732860000.000100"
    discord = ThreadRef(platform="discord", workspace="81384", channel="111", thread="222")
    assert workflow_id_for(discord) == "discord-81384-222"
    # The parent channel does not matter for Discord: a thread id is unique on its own.
    assert workflow_id_for(discord.model_copy(update={"channel": "999"})) == "discord-81384-222"
    odd = ThreadRef(platform="local", workspace="a-b", channel="c d", thread="ü~")
    assert workflow_id_for(odd) == "local-a~2Db-c~20d-~C3~BC~7E"
    twin = ThreadRef(platform="local", workspace="a", channel="b-c d", thread="ü~")
    assert workflow_id_for(twin) != workflow_id_for(odd)


async def test_first_message_starts_with_signal_with_start(router, temporal) -> None:
    assert (
        await router.on_message(message("e1", "please refund order 1234", opens=True))
        == Routed.STARTED
    )
    kind, wid, signal, (start, kwargs) = temporal.calls[0]
    assert (kind, wid, signal) == ("start", "slack-T1-C2-1732860000.000100", "customer_message")
    assert start.customer == CUSTOMER and start.opening_text == "please refund order 1234"
    assert start.hold_before_refund is True
    assert kwargs["start_signal_args"][0].message_id == "m-e1"


async def test_replies_become_updates_and_clicks_signals(router, temporal) -> None:
    await router.on_message(message("e1", "refund 1234", opens=True))
    assert await router.on_message(message("e2", "Yes")) == Routed.SIGNALLED
    click = InboundClick(
        event_id="c1",
        workflow_id=workflow_id_for(THREAD),
        decision="approve",
        actor=Actor(platform="slack", user_id="U0SUPPORT"),
        click_id="click-1",
    )
    assert await router.on_click(click) == Routed.SIGNALLED
    assert [(c[0], c[2]) for c in temporal.calls] == [
        ("start", "customer_message"),
        ("update", "customer_message_now"),
        ("signal", "approval"),
    ]
    assert temporal.calls[1][3].text == "Yes" and temporal.calls[1][3].message_id == "m-e2"
    assert temporal.calls[2][3].actor.user_id == "U0SUPPORT"


async def test_a_message_no_worker_accepts_goes_as_the_signal(router, temporal, tmp_path) -> None:
    """An Update needs a Worker to accept it, a Signal does not: with none polling, the message
    is not left waiting on one; it goes as the Signal and the inbox entry is done."""
    await router.on_message(message("e1", "refund 1234", opens=True))
    temporal.worker = False
    assert await router.on_message(message("e2", "Yes")) == Routed.SIGNALLED
    assert [(c[0], c[2], c[3].message_id) for c in temporal.calls[1:]] == [
        ("signal", "customer_message", "m-e2")
    ]
    assert await Inbox(SqliteDatabase(tmp_path)).size() == 0


async def test_a_message_an_older_worker_refuses_goes_as_the_signal(router, temporal) -> None:
    # A Worker of a release without the Update's handler rejects it: the Signal it has.
    await router.on_message(message("e1", "refund 1234", opens=True))
    temporal.refuse_updates = True
    assert await router.on_message(message("e2", "Yes")) == Routed.SIGNALLED
    assert [(c[0], c[2]) for c in temporal.calls[1:]] == [("signal", "customer_message")]


@pytest.mark.parametrize(
    "status",
    [
        RPCStatusCode.RESOURCE_EXHAUSTED,  # the Workflow's limit on Updates in flight
        RPCStatusCode.PERMISSION_DENIED,  # Updates turned off on the cluster
    ],
)
async def test_a_message_whose_update_is_refused_by_the_server_goes_as_the_signal(
    router, temporal, tmp_path, status
) -> None:
    # Answers that, to a Signal, would say Temporal cannot be used: to the Update they may be
    # its own. The Signal is delivered at once, and the customer is told nothing.
    await router.on_message(message("e1", "refund 1234", opens=True))
    temporal.update_error = RPCError("refused", status, b"")
    assert await router.on_message(message("e2", "Yes")) == Routed.SIGNALLED
    assert [(c[0], c[2]) for c in temporal.calls[1:]] == [("signal", "customer_message")]
    assert await Inbox(SqliteDatabase(tmp_path)).size() == 0


async def test_a_message_while_temporal_is_down_stays_in_the_inbox(router, temporal) -> None:
    # The Update fails, and so does the Signal after it: the entry waits, the customer is told.
    await router.on_message(message("e1", "refund 1234", opens=True))
    temporal.down = True
    assert await router.on_message(message("e2", "Yes")) == Routed.QUEUED
    assert temporal.attempts[1:] == [temporal.attempts[1]] * 2  # the Update, then the Signal


async def test_a_message_to_a_finished_conversation_is_closed_not_retried(
    router, temporal, tmp_path
) -> None:
    await router.on_message(message("e1", "refund 1234", opens=True))
    temporal.finished.add(workflow_id_for(THREAD))
    assert await router.on_message(message("e2", "thanks!")) == Routed.CLOSED
    assert await Inbox(SqliteDatabase(tmp_path)).size() == 0


async def test_the_inbox_delivers_what_waited_as_signals(router, temporal, tmp_path) -> None:
    """The inbox's own delivery (after an outage) never waits on a Worker: Signals, in order."""
    await router.on_message(message("e1", "refund 1234", opens=True))
    temporal.down = True
    assert await router.on_message(message("e2", "Yes")) == Routed.QUEUED
    temporal.down = False
    assert await router.deliver_pending() == 1
    assert [(c[0], c[2], c[3].text) for c in temporal.calls[1:]] == [
        ("signal", "customer_message", "Yes")
    ]
    assert await Inbox(SqliteDatabase(tmp_path)).size() == 0


async def test_bots_edits_and_duplicates_never_reach_the_agent(router, temporal) -> None:
    await router.on_message(message("e1", "refund 1234", opens=True))
    assert await router.on_message(message("e2", from_bot=True)) == Routed.IGNORED
    assert await router.on_message(message("e3", edited_or_deleted=True)) == Routed.IGNORED
    assert await router.on_message(message("e4")) == Routed.SIGNALLED
    assert await router.on_message(message("e4")) == Routed.DUPLICATE
    assert len(temporal.calls) == 2


async def test_duplicate_window_is_at_least_ten_minutes(temporal, tmp_path) -> None:
    now = [0.0]
    recent = RecentEvents(clock=lambda: now[0])

    async def hold() -> bool:
        return False

    router = ConversationRouter(temporal, "q", Inbox(SqliteDatabase(tmp_path)), hold, recent)
    await router.on_message(message("e1", "refund 1234", opens=True))
    now[0] = 10 * 60
    assert await router.on_message(message("e1", "refund 1234", opens=True)) == Routed.DUPLICATE
    assert len(temporal.calls) == 1


async def test_oversized_text_is_cut_before_the_signal(router, temporal) -> None:
    await router.on_message(message("e1", "refund 1234", opens=True))
    await router.on_message(message("e2", "x" * (MAX_SIGNAL_TEXT * 3)))
    sent = temporal.calls[1][3].text
    assert len(sent) == MAX_SIGNAL_TEXT and sent.endswith("…")


async def test_inbox_keeps_messages_while_temporal_is_down(router, temporal, tmp_path) -> None:
    await router.on_message(message("e1", "refund 1234", opens=True))
    temporal.down = True
    assert await router.on_message(message("e2", "Yes")) == Routed.QUEUED
    assert await router.on_message(message("e3", "Split seam")) == Routed.QUEUED
    assert await router.deliver_pending() == 0  # still down: nothing lost, nothing delivered
    temporal.down = False
    # Temporal is back, but an earlier message still waits: the new one queues behind it.
    assert await router.on_message(message("e4", "and it smells")) == Routed.QUEUED
    assert await router.deliver_pending() == 3
    assert [c[3].text for c in temporal.calls[1:]] == ["Yes", "Split seam", "and it smells"]
    assert await Inbox(SqliteDatabase(tmp_path)).size() == 0
    # A platform retry of a queued event is a duplicate: it was accepted when it was queued.
    assert await router.on_message(message("e2", "Yes")) == Routed.DUPLICATE


async def test_the_inbox_survives_a_bot_restart(temporal, tmp_path) -> None:
    async def hold() -> bool:
        return False

    temporal.down = True
    first = ConversationRouter(temporal, "q", Inbox(SqliteDatabase(tmp_path)), hold)
    assert await first.on_message(message("e1", "refund 1234", opens=True)) == Routed.QUEUED
    temporal.down = False
    second = ConversationRouter(temporal, "q", Inbox(SqliteDatabase(tmp_path)), hold)
    assert await second.deliver_pending() == 1
    assert temporal.calls[0][0] == "start"


async def test_a_delivery_that_fails_after_the_ack_is_kept_not_raised(temporal, tmp_path) -> None:
    # The platform has acknowledged the event: raising would lose it (Slack Socket Mode never sends
    # an acknowledged envelope again). Any failure, not only "unreachable", keeps it.
    router = quick_router(temporal, tmp_path)
    await router.on_message(message("e1", "refund 1234", opens=True))
    wid = workflow_id_for(THREAD)
    temporal.failing[wid] = RPCError("internal error", RPCStatusCode.INTERNAL, b"")
    assert await router.on_message(message("e2", "Yes")) == Routed.QUEUED
    temporal.failing[wid] = KeyError("a bug in our own code")
    assert await router.on_message(message("e3", "Split seam")) == Routed.QUEUED
    # The platform's own retry of an event kept in the inbox is a duplicate, not a second copy.
    assert await router.on_message(message("e2", "Yes")) == Routed.DUPLICATE
    assert router.seen("e2") and router.seen("e3")

    del temporal.failing[wid]
    assert await router.deliver_pending() == 2
    assert [c[3].text for c in temporal.calls[1:]] == ["Yes", "Split seam"]
    assert await router_inbox(tmp_path).size() == 0


async def test_a_kept_message_whose_database_goes_before_delivery_is_queued_not_refused(
    temporal, tmp_path, monkeypatch
) -> None:
    """Kept at the ack, then the database goes before the inbox can be read to deliver it (a
    PostgreSQL outage): the message is in the inbox, so the customer must not be told it was not
    passed on (writing it again, the conversation would take it twice). It is QUEUED and
    delivered once, by the inbox, when the database is back."""
    router = quick_router(temporal, tmp_path)
    await router.on_message(message("e1", "refund 1234", opens=True))
    kept = await router.keep(message("e2", "Yes"))
    assert isinstance(kept, Kept)

    async def database_gone(*_: Any) -> Any:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(router._inbox, "first_for", database_gone)
    assert await router.on_message(message("e2", "Yes")) == Routed.QUEUED
    assert [c[3].text for c in temporal.calls[1:]] == []
    monkeypatch.undo()

    assert await router.deliver_pending() == 1
    assert [c[3].text for c in temporal.calls[1:]] == ["Yes"]
    assert await router.on_message(message("e2", "Yes")) == Routed.DUPLICATE
    assert await router_inbox(tmp_path).size() == 0


async def test_a_failed_delivery_whose_failure_cannot_be_recorded_is_queued_not_refused(
    temporal, tmp_path, monkeypatch
) -> None:
    """Temporal refuses the delivery and the database goes before the failed attempt is recorded:
    still QUEUED (the entry is in the inbox as it was), and delivered once by the inbox."""
    router = quick_router(temporal, tmp_path)
    await router.on_message(message("e1", "refund 1234", opens=True))
    wid = workflow_id_for(THREAD)
    temporal.failing[wid] = RPCError("internal error", RPCStatusCode.INTERNAL, b"")

    async def database_gone(*_: Any) -> None:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(router._inbox, "failed", database_gone)
    assert await router.on_message(message("e2", "Yes")) == Routed.QUEUED
    monkeypatch.undo()
    del temporal.failing[wid]

    assert await router.deliver_pending() == 1
    assert [c[3].text for c in temporal.calls[1:] if c[2] == "customer_message"] == ["Yes"]
    assert await router_inbox(tmp_path).size() == 0


async def test_an_entry_that_keeps_failing_becomes_a_dead_letter_and_blocks_nothing(
    temporal, tmp_path, caplog
) -> None:
    router = quick_router(temporal, tmp_path, max_attempts=3)
    poisoned = THREAD.model_copy(update={"thread": "1732860000.000200"})
    poisoned_wid = workflow_id_for(poisoned)
    await router.on_message(message("a1", "refund 1234", opens=True))
    await router.on_message(message("p1", "refund 4500", opens=True, thread=poisoned))
    temporal.failing[poisoned_wid] = RPCError("workflow id too long", RPCStatusCode.INTERNAL, b"")

    assert await router.on_message(message("p2", "Yes", thread=poisoned)) == Routed.QUEUED
    # Queued behind its own conversation's failing entry, in order ...
    assert await router.on_message(message("p3", "Split seam", thread=poisoned)) == Routed.QUEUED
    # ... while another conversation is not held back, neither live nor in the inbox.
    assert await router.on_message(message("a2", "Yes")) == Routed.SIGNALLED

    inbox = router_inbox(tmp_path)
    await router.deliver_pending()  # attempt 2 of p2 (the live one was 1); p3 waits behind it
    [first, second] = await inbox.pending()
    assert (first.attempts, second.attempts) == (2, 0)
    assert first.last_error == "RPCError: workflow id too long"
    await router.deliver_pending()  # attempt 3: the last
    [dead] = await inbox.dead_letters()
    assert dead.kind == "message" and dead.workflow_id == poisoned_wid and dead.attempts == 3
    assert dead.error == "RPCError: workflow id too long"
    assert InboundMessage.model_validate_json(dead.payload).text == "Yes"  # kept whole
    assert "will not be delivered" in caplog.text and "dead letter" in caplog.text

    # The dead letter no longer holds its conversation back: once Temporal takes it, the next
    # entry goes through.
    del temporal.failing[poisoned_wid]
    assert await router.deliver_pending() == 1
    assert temporal.calls[-1][1:3] == (poisoned_wid, "customer_message")
    assert temporal.calls[-1][3].text == "Split seam"
    depth = await inbox.depth()
    assert (depth.waiting, depth.dead) == (0, 1) and str(depth) == "0 waiting, 1 dead letter"


async def test_a_failed_entry_waits_for_its_retry_time(temporal, tmp_path) -> None:
    hour = Backoff(first=3600, cap=3600, jitter=False)
    router = quick_router(temporal, tmp_path, inbox_retry=hour)
    await router.on_message(message("e1", "refund 1234", opens=True))
    wid = workflow_id_for(THREAD)
    temporal.failing[wid] = RPCError("internal error", RPCStatusCode.INTERNAL, b"")
    assert await router.on_message(message("e2", "Yes")) == Routed.QUEUED  # attempt 1 failed
    del temporal.failing[wid]
    tried = len(temporal.attempts)
    assert await router.deliver_pending() == 0
    assert len(temporal.attempts) == tried  # not tried again before its time
    [waiting] = await router_inbox(tmp_path).pending()
    assert waiting.attempts == 1 and waiting.last_error == "RPCError: internal error"
    assert waiting.retry_at is not None and waiting.retry_at > time.time() + 3000


async def test_while_temporal_is_unreachable_no_entry_is_blamed(temporal, tmp_path) -> None:
    router = quick_router(temporal, tmp_path, max_attempts=2)
    temporal.down = True
    assert await router.on_message(message("e1", "refund 1234", opens=True)) == Routed.QUEUED
    for _ in range(5):
        assert await router.deliver_pending() == 0
    [kept] = await router_inbox(tmp_path).pending()
    assert kept.attempts == 0 and await router_inbox(tmp_path).dead_letters() == []


async def test_an_entry_that_cannot_be_read_is_a_dead_letter_at_once(temporal, tmp_path) -> None:
    router = quick_router(temporal, tmp_path)
    inbox = router_inbox(tmp_path)
    # Written by some other version of the bot: the stored payload is no InboundMessage.
    await inbox.put("message", Actor(platform="slack", user_id="U1"), "slack-T1-C2-1")
    assert await router.on_message(message("e1", "refund 1234", opens=True)) == Routed.STARTED
    assert await router.deliver_pending() == 0
    [dead] = await inbox.dead_letters()
    assert dead.attempts == 0 and dead.error.startswith("cannot be read: ValidationError")
    assert temporal.attempts == [workflow_id_for(THREAD)]  # never sent to Temporal


async def test_the_delivery_task_retries_until_temporal_is_back(temporal, tmp_path) -> None:
    router = quick_router(temporal, tmp_path)
    temporal.down = True
    assert await router.on_message(message("e1", "refund 1234", opens=True)) == Routed.QUEUED
    delivery = asyncio.create_task(router.run_delivery())
    try:
        tries = await wait_for(lambda: len(temporal.attempts) >= 3, what="the inbox retried")
        assert tries
        temporal.down = False  # no new message wakes it: the retry alone delivers
        await wait_for(lambda: bool(temporal.calls), what="the kept opening delivered")
        assert await wait_for(lambda: _empty(tmp_path), what="the inbox empty")
    finally:
        delivery.cancel()


async def test_the_delivery_task_outlives_its_database_going_away(
    temporal, tmp_path, monkeypatch
) -> None:
    """The inbox's database cannot be read for a while (a PostgreSQL restart, say): the delivery
    task tries again and delivers what was kept once it can; it used to end at the first error,
    and nothing was delivered from the inbox again."""
    router = quick_router(temporal, tmp_path)
    temporal.down = True
    assert await router.on_message(message("e1", "refund 1234", opens=True)) == Routed.QUEUED
    temporal.down = False
    original = router._inbox.pending
    reads = 0

    async def database_gone() -> list[Any]:
        nonlocal reads
        reads += 1
        if reads <= 3:
            raise sqlite3.OperationalError("unable to open database file")
        return await original()

    monkeypatch.setattr(router._inbox, "pending", database_gone)
    delivery = asyncio.create_task(router.run_delivery())
    try:
        await wait_for(lambda: bool(temporal.calls), what="the kept opening delivered")
        assert reads > 3 and not delivery.done()
        assert await wait_for(lambda: _empty(tmp_path), what="the inbox empty")
    finally:
        delivery.cancel()


async def test_a_kept_message_its_handler_never_delivers_is_delivered_by_the_inbox(
    temporal, tmp_path, monkeypatch
) -> None:
    """Kept at the ack, then its handler never runs (Bolt drops a request whose authorization
    call fails): with nothing else arriving, the delivery task delivers it once the grace for its
    handler is over."""
    monkeypatch.setattr("bot.conversations.KEPT_GRACE", 0.2)
    router = quick_router(temporal, tmp_path)
    delivery = asyncio.create_task(router.run_delivery())
    try:
        await wait_for(lambda: _empty(tmp_path), what="the delivery task idle")
        kept = await router.keep(message("e1", "refund 1234", opens=True))
        assert isinstance(kept, Kept)  # acknowledged; the handler that would deliver it is gone
        await wait_for(lambda: bool(temporal.calls), what="the kept opening delivered")
        assert await wait_for(lambda: _empty(tmp_path), what="the inbox empty")
    finally:
        delivery.cancel()


async def test_an_inbox_from_an_older_version_is_read_and_delivered(temporal, tmp_path) -> None:
    path = tmp_path / "inbox.sqlite"
    start = ConversationStart(
        thread=THREAD,
        customer=CUSTOMER,
        opening_message_id="m-old",
        opening_text="refund 1234",
        hold_before_refund=False,
    )
    with sqlite3.connect(path) as db:  # the inbox table as the first release created it
        db.execute(
            "CREATE TABLE inbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, "
            "payload TEXT NOT NULL, queued_at TEXT NOT NULL)"
        )
        db.execute(
            "INSERT INTO inbox (kind, payload, queued_at) VALUES ('start', ?, '2025-01-01')",
            (start.model_dump_json(),),
        )
    router = quick_router(temporal, tmp_path)
    # Until it is delivered, the old entry (whose conversation the table did not record) holds
    # back every conversation, as every entry did then.
    other = THREAD.model_copy(update={"thread": "1732860000.000300"})
    assert await router.on_message(message("n1", "hi", opens=True, thread=other)) == Routed.QUEUED
    assert await router.deliver_pending() == 2
    assert [c[1] for c in temporal.calls] == [workflow_id_for(THREAD), workflow_id_for(other)]


def quick_router(temporal: FakeTemporal, tmp_path: Path, **kwargs: Any) -> ConversationRouter:
    """A router whose inbox retries at once (no waiting between attempts) unless told otherwise."""

    async def no_hold() -> bool:
        return False

    kwargs.setdefault("inbox_retry", Backoff(first=0, cap=0, jitter=False))
    kwargs.setdefault("unreachable_retry", Backoff(first=0.01, cap=0.05, jitter=False))
    return ConversationRouter(
        temporal,  # type: ignore[arg-type]  # for temporalio's Client
        "refund-bot",
        Inbox(SqliteDatabase(tmp_path)),
        no_hold,
        **kwargs,
    )


def router_inbox(tmp_path: Path) -> Inbox:
    return Inbox(SqliteDatabase(tmp_path))


async def _empty(tmp_path: Path) -> bool:
    return await router_inbox(tmp_path).size() == 0


async def test_message_in_a_finished_conversation_gets_closed(router, temporal) -> None:
    await router.on_message(message("e1", "refund 1234", opens=True))
    temporal.finished.add(workflow_id_for(THREAD))
    assert await router.on_message(message("e2", "hello again")) == Routed.CLOSED
    # A redelivered root after the dedup window cannot start the thread's conversation again.
    assert await router.on_message(message("e9", "refund 1234", opens=True)) == Routed.CLOSED
    other = THREAD.model_copy(update={"thread": "999.1"})
    stray = message("e3").model_copy(update={"thread": other})
    assert await router.on_message(stray) == Routed.UNKNOWN


async def test_a_redelivery_during_the_first_delivery_waits_for_its_verdict(
    router, temporal
) -> None:
    await router.on_message(message("e1", "refund 1234", opens=True))
    release = asyncio.Event()
    original = temporal.get_workflow_handle

    def slow(workflow_id: str) -> Any:
        handle = original(workflow_id)

        async def signal(*args: Any, **kwargs: Any) -> None:
            await release.wait()  # Temporal is slow to answer the first delivery
            await handle.signal(*args, **kwargs)

        async def start_update(*args: Any, **kwargs: Any) -> None:
            await release.wait()
            await handle.start_update(*args, **kwargs)

        return SimpleNamespace(signal=signal, start_update=start_update)

    temporal.get_workflow_handle = slow
    first = asyncio.create_task(router.on_message(message("e2", "Yes")))
    retry = asyncio.create_task(router.on_message(message("e2", "Yes")))  # X-Slack-Retry-Num: 1
    await asyncio.sleep(0)  # let both reach the router before Temporal answers
    release.set()
    assert sorted([await first, await retry]) == [Routed.DUPLICATE, Routed.SIGNALLED]
    assert [c[2] for c in temporal.calls] == ["customer_message", "customer_message_now"]


async def test_redeliveries_waiting_on_a_failed_keep_write_it_once(router) -> None:
    """The inbox cannot commit the first delivery (its database locked) while Slack's two retries
    wait for it: the first keep fails as the database said, the retries write the event once
    and both get that entry (each used to delete the other's in-flight mark: a KeyError, so a
    503 for an event kept)."""
    release = asyncio.Event()
    original = router._inbox.put
    calls = 0

    async def put(kind: str, payload: Any, workflow_id: str, **kwargs: Any) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            await release.wait()
            raise sqlite3.OperationalError("database is locked")
        return await original(kind, payload, workflow_id, **kwargs)

    router._inbox.put = put
    first = asyncio.create_task(router.keep(message("e3", "Yes")))
    retries = [asyncio.create_task(router.keep(message("e3", "Yes"))) for _ in range(2)]
    await asyncio.sleep(0)  # all three reach the router before the write fails
    release.set()
    with pytest.raises(sqlite3.OperationalError):
        await first
    kept = [await retry for retry in retries]
    assert isinstance(kept[0], Kept) and kept[1] == kept[0], kept
    assert calls == 2  # written once more, not once per retry
    assert len(await router._inbox.pending()) == 1


async def test_a_delivered_message_whose_entry_cannot_be_removed_is_not_refused(
    router, temporal
) -> None:
    """Delivered, then the database goes before its inbox entry is removed: the verdict stands
    (the bot must not ask the customer to send it again), and the entry is removed when next
    seen, not delivered a second time."""
    await router.on_message(message("e4", "refund 1234", opens=True))
    original = router._inbox.remove

    async def database_gone(seq: int) -> None:
        raise sqlite3.OperationalError("database is locked")

    router._inbox.remove = database_gone
    assert await router.on_message(message("e5", "Yes")) == Routed.SIGNALLED
    assert len(await router._inbox.pending()) == 1  # still there: it could not be removed
    router._inbox.remove = original
    assert await router.deliver_pending() == 1  # removed, not delivered again
    assert await router._inbox.pending() == []
    # The opening, then the reply (an Update).
    assert [c[2] for c in temporal.calls] == ["customer_message", "customer_message_now"]


async def test_an_event_an_adapter_cannot_read_is_kept_as_a_dead_letter(
    router, temporal, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = {"event": {"user_profile": {"display_name": 7}}, "text": "lone \ud800 surrogate"}
    await keep_unreadable(router, "slack", "message", raw, "`event.user_profile`: not a string")
    [dead] = await router_inbox(tmp_path).dead_letters()
    kept = UnreadableEvent.model_validate_json(dead.payload)
    assert (kept.platform, kept.kind, kept.reason) == (
        "slack",
        "message",
        "`event.user_profile`: not a string",
    )
    assert json.loads(kept.payload) == raw and dead.error == kept.reason
    assert temporal.attempts == [] and await router_inbox(tmp_path).pending() == []
    (line,) = [r for r in caplog.records if r.name == "bot.conversations"]
    assert line.levelname == "WARNING" and line.exc_info is None
    assert f"dead letter {dead.seq}" in line.getMessage()


async def test_an_unreadable_event_that_cannot_be_kept_either_is_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        async def keep_unreadable(self, event: UnreadableEvent) -> None:
            raise OSError("disk full")

    await keep_unreadable(Broken(), "discord", "click", "{}", "no id")  # type: ignore[arg-type]
    (line,) = caplog.records
    assert line.levelname == "WARNING" and line.exc_info is None
    assert "disk full" in line.getMessage()


async def test_a_message_is_in_the_inbox_before_its_ack_and_a_restart_delivers_it_once(
    router, temporal, tmp_path
) -> None:
    """keep() commits the message to the inbox and returns: that is when the platform may hear
    "ok". If the process dies right then (its delivery never runs), a new router on the same
    inbox delivers it, once."""
    await router.on_message(message("e1", "refund 1234", opens=True))
    kept = await router.keep(message("e2", "Yes"))
    assert isinstance(kept, Kept)
    [entry] = await router_inbox(tmp_path).pending()
    assert entry.seq == kept.seq and entry.workflow_id == kept.workflow_id
    assert [c[2] for c in temporal.calls] == ["customer_message"]  # the opening only, so far

    # The process is gone; another starts on the same inbox and delivers what it finds.
    async def hold() -> bool:
        return False

    restarted = ConversationRouter(temporal, "refund-bot", router_inbox(tmp_path), hold)
    assert await restarted.deliver_pending() == 1
    assert [c[3].text for c in temporal.calls[1:]] == ["Yes"]
    assert await _empty(tmp_path)
    assert await restarted.deliver_pending() == 0  # once


async def test_a_kept_message_is_delivered_right_after_its_ack_not_twice(
    router, temporal, tmp_path
) -> None:
    await router.on_message(message("e1", "refund 1234", opens=True))
    kept = await router.keep(message("e2", "Yes"))
    assert isinstance(kept, Kept)
    # The delivery loop leaves it to the handler that kept it (its ack is going out) ...
    assert await router.deliver_pending() == 0
    # ... which delivers it (the listener's on_message finds it kept), and the redelivery that
    # arrives meanwhile is a duplicate.
    assert await router.on_message(message("e2", "Yes")) == Routed.SIGNALLED
    assert await router.on_message(message("e2", "Yes")) == Routed.DUPLICATE
    assert [c[3].text for c in temporal.calls[1:]] == ["Yes"]
    assert await _empty(tmp_path)


async def test_a_message_kept_waiting_is_delivered_only_once_released(
    router, temporal, tmp_path
) -> None:
    """An opening kept before its thread exists: the delivery loop leaves it (and the reply kept
    behind it) alone, a restarted router finds it waiting, its release delivers both in order."""
    delivery = asyncio.create_task(router.run_delivery())
    try:
        kept = await router.keep_waiting(message("e1", "refund 1234", opens=True), "thread")
        assert isinstance(kept, Kept)
        assert await router.on_message(message("e2", "Yes")) == Routed.QUEUED  # behind it
        other = message(
            "o1", "refund 99", opens=True, thread=THREAD.model_copy(update={"thread": "9"})
        )
        assert await router.on_message(other) == Routed.STARTED  # the positive control
        assert await router.deliver_pending() == 0
        assert [c[1] for c in temporal.calls] == [workflow_id_for(other.thread)]

        async def hold() -> bool:
            return True

        # Another router on the same inbox: the bot restarted.
        later = ConversationRouter(temporal, "refund-bot", Inbox(SqliteDatabase(tmp_path)), hold)
        [waiting] = await later.waiting("thread")
        assert waiting.kept.seq == kept.seq and waiting.kept.workflow_id == kept.workflow_id
        assert waiting.author == CUSTOMER and waiting.attempts == 0
        assert (await router.waiting("thread"))[0].kept == kept  # as kept, in the same router
        await later.note_wait(waiting.kept, "500 Internal Server Error", time.time() + 60)
        assert (await later.waiting("thread"))[0].attempts == 1

        assert await router.release(kept) == Routed.STARTED
        await wait_for(lambda: len(temporal.calls) == 3, what="the reply after its opening")
        assert [(c[0], c[1]) for c in temporal.calls[1:]] == [
            ("start", kept.workflow_id),
            ("signal", kept.workflow_id),
        ]
        assert await router.waiting("thread") == []
    finally:
        delivery.cancel()

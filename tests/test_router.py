"""The conversation router with a mocked Temporal client (the network edge), real SQLite inbox."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agent.models import Actor, ThreadRef
from bot.conversations import (
    MAX_SIGNAL_TEXT,
    ConversationRouter,
    InboundClick,
    InboundMessage,
    Routed,
)
from bot.dedup import RecentEvents
from bot.ids import workflow_id_for
from bot.inbox import Inbox

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

    async def start_workflow(self, _run: Any, start: Any, **kwargs: Any) -> None:
        if self.down:
            raise _unavailable()
        assert kwargs["id_reuse_policy"] == WorkflowIDReusePolicy.REJECT_DUPLICATE
        if kwargs["id"] in self.finished:  # what REJECT_DUPLICATE does for a closed Workflow ID
            raise WorkflowAlreadyStartedError(kwargs["id"], "RefundConversation")
        self.calls.append(("start", kwargs["id"], kwargs["start_signal"], (start, kwargs)))
        self.started.add(kwargs["id"])

    def get_workflow_handle(self, workflow_id: str) -> Any:
        async def signal(name: str, arg: Any, rpc_timeout: Any = None) -> None:
            if self.down:
                raise _unavailable()
            if workflow_id in self.finished or workflow_id not in self.started:
                raise RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b"")
            self.calls.append(("signal", workflow_id, name, arg))

        async def describe(rpc_timeout: Any = None) -> Any:
            if workflow_id not in self.started:
                raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")
            return SimpleNamespace(status=WorkflowExecutionStatus.COMPLETED)

        return SimpleNamespace(signal=signal, describe=describe)


@pytest.fixture
def temporal() -> FakeTemporal:
    return FakeTemporal()


@pytest.fixture
def router(temporal: FakeTemporal, tmp_path) -> ConversationRouter:
    async def hold() -> bool:
        return True

    return ConversationRouter(temporal, "refund-bot", Inbox(tmp_path / "inbox.sqlite"), hold)  # type: ignore[arg-type]


def message(event_id: str, text: str = "Yes", *, opens: bool = False, **kw: Any) -> InboundMessage:
    return InboundMessage(
        event_id=event_id,
        thread=THREAD,
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


async def test_replies_and_clicks_become_signals(router, temporal) -> None:
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
        ("signal", "customer_message"),
        ("signal", "approval"),
    ]
    assert temporal.calls[1][3].text == "Yes" and temporal.calls[1][3].message_id == "m-e2"
    assert temporal.calls[2][3].actor.user_id == "U0SUPPORT"


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

    router = ConversationRouter(temporal, "q", Inbox(tmp_path / "i.sqlite"), hold, recent)  # type: ignore[arg-type]
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
    assert await Inbox(tmp_path / "inbox.sqlite").size() == 0
    # A platform retry of a queued event is a duplicate: it was accepted when it was queued.
    assert await router.on_message(message("e2", "Yes")) == Routed.DUPLICATE


async def test_the_inbox_survives_a_bot_restart(temporal, tmp_path) -> None:
    async def hold() -> bool:
        return False

    temporal.down = True
    first = ConversationRouter(temporal, "q", Inbox(tmp_path / "i.sqlite"), hold)  # type: ignore[arg-type]
    assert await first.on_message(message("e1", "refund 1234", opens=True)) == Routed.QUEUED
    temporal.down = False
    second = ConversationRouter(temporal, "q", Inbox(tmp_path / "i.sqlite"), hold)  # type: ignore[arg-type]
    assert await second.deliver_pending() == 1
    assert temporal.calls[0][0] == "start"


async def test_a_failed_first_delivery_is_processed_on_retry(router, temporal) -> None:
    await router.on_message(message("e1", "refund 1234", opens=True))
    boom = RPCError("invalid argument", RPCStatusCode.INVALID_ARGUMENT, b"")
    original = temporal.get_workflow_handle

    def failing(workflow_id: str) -> Any:
        async def signal(*_: Any, **__: Any) -> None:
            raise boom

        return SimpleNamespace(signal=signal)

    temporal.get_workflow_handle = failing
    with pytest.raises(RPCError):
        await router.on_message(message("e2", "Yes"))
    temporal.get_workflow_handle = original
    assert await router.on_message(message("e2", "Yes")) == Routed.SIGNALLED


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

        return SimpleNamespace(signal=signal)

    temporal.get_workflow_handle = slow
    first = asyncio.create_task(router.on_message(message("e2", "Yes")))
    retry = asyncio.create_task(router.on_message(message("e2", "Yes")))  # X-Slack-Retry-Num: 1
    await asyncio.sleep(0)  # let both reach the router before Temporal answers
    release.set()
    assert sorted([await first, await retry]) == [Routed.DUPLICATE, Routed.SIGNALLED]
    assert [c[2] for c in temporal.calls] == ["customer_message", "customer_message"]  # start + 1

"""The platform-neutral conversation router: what every chat adapter shares.

    adapter -> keep (the inbox, committed) -> the platform's ack -> deliver -> Temporal
                                                 ... cannot now -> the inbox delivers it later
    deliver, a customer's reply: the Update a Worker accepts (bounded wait)
                                 ... not accepted, refused -> the Signal
    adapter, an acknowledged event it cannot read -> keep_unreadable -> inbox, as a dead letter
    adapter, a message it must do something for first -> keep_waiting (kept, held) ... release

An acknowledgement means durable: every customer message and click is written ahead to the inbox
(the stores' database, committed) before its platform hears "ok" (`keep`); Slack never resends
what it got a 200 for, and Discord's gateway sends once. Delivery then comes from the inbox, once,
in arrival order within its conversation (`deliver`, right after the ack; the background loop for
anything that must wait: Temporal down, an earlier entry retrying). `on_message` and `on_click`
are both, for adapters whose ack is the handler's return. Bots, edits, deletions and redeliveries
never reach the agent; the Workflow ID is derived from the thread; an opening is signal-with-start,
a click a Signal, a reply the `customer_message_update` Update (the Signal when no Worker accepts
it in time, or on the background loop), and a describe only when the Signal finds no running
Workflow. An entry is removed once Temporal has it in Event History. An entry that fails on its
own is retried with backoff and, after MAX_ATTEMPTS (or at once if it can never be read again),
kept as a dead letter with its error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.common import MetricMeter, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agent import tracing
from agent.models import (
    MAX_TEXT_CHARS,
    Actor,
    Approval,
    ConversationStart,
    CustomerMessage,
    Platform,
    ThreadRef,
    Timing,
)
from agent.versions import MAX_CONVERSATION_AGE, version_attributes
from agent.workflow import RefundConversation
from bot.dedup import RecentEvents
from bot.ids import workflow_id_for
from bot.inbox import Inbox, Pending
from bot.keyed_locks import KeyedLocks
from bot.reconnect import Backoff, one_line

log = logging.getLogger(__name__)

# Text is cut to this many characters before it becomes a Signal (the Workflow cuts again).
MAX_SIGNAL_TEXT = MAX_TEXT_CHARS
# How long one call to Temporal may take before the message goes to the inbox instead. Short, so
# an adapter's reply to the customer never waits on a Temporal that is down.
RPC_TIMEOUT = timedelta(seconds=5)
# How long a reply waits for a Worker to accept it as an Update before it goes as the Signal. A
# Worker accepts it when the workflow task that takes it completes, and that task also runs the
# agent's next step (the offline decide step and the first try of the post are local activities
# inside it): on a server with Temporal's default settings, on a loaded machine, acceptance took
# 31-62 ms at p50 and 104-318 ms at p99 over five runs (bench.turn_update --server default).
# A second leaves room for a slow platform's post; past it (no Worker polls, or the post is slower
# still) the Signal follows, and the Workflow takes the message once, by its id.
UPDATE_ACCEPT_TIMEOUT = timedelta(seconds=1)
# Answers that say Temporal itself cannot be used right now (down, overloaded, this client not let
# in): no entry can be delivered, so none is blamed for it; everything waits.
_UNREACHABLE = {
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.CANCELLED,
    RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.UNAUTHENTICATED,
    RPCStatusCode.PERMISSION_DENIED,
}
# An inbox entry that fails on its own is tried this many times, waiting INBOX_RETRY between
# attempts (2 s doubling to 5 min: about 14 minutes in all), then kept as a dead letter.
MAX_ATTEMPTS = 10
INBOX_RETRY = Backoff(first=2.0, cap=300.0, jitter=False)
# How long the inbox's own delivery leaves an entry to the handler that kept it (which delivers
# it right after its platform's ack); past it, the loop takes it.
KEPT_GRACE = 5.0
# While Temporal is unreachable, the inbox is tried again after this (doubling, capped).
UNREACHABLE_RETRY = Backoff(first=1.0, cap=30.0, jitter=False)

_Arg = TypeVar("_Arg", bound=BaseModel)

OPENED = "refund_bot_conversations_opened"
OPENED_DESCRIPTION = (
    "Conversations this bot process started in Temporal (signal-with-start that started)"
)


class InboundMessage(BaseModel):
    """A chat message, as an adapter saw it."""

    event_id: str  # the platform's delivery id (Slack event_id, Discord message id, local seq)
    thread: ThreadRef
    message_id: str
    author: Actor
    text: str
    opens_thread: bool  # a top-level post in the support channel: starts a conversation
    from_bot: bool = False
    edited_or_deleted: bool = False


class InboundClick(BaseModel):
    """An Approve or Deny click on an escalation."""

    event_id: str
    workflow_id: str
    decision: Literal["approve", "deny"]
    actor: Actor
    click_id: str
    round: int | None = None  # the escalation round of the clicked buttons (None: older buttons)


class UnreadableEvent(BaseModel):
    """An event its platform has had its ack for that the adapter cannot turn into an
    InboundMessage or InboundClick: kept as a dead letter, as the platform sent it, with why."""

    platform: Platform
    kind: Literal["message", "click"]  # what it would have been
    payload: str  # the platform's payload, as JSON text
    reason: str  # one line


class Routed(StrEnum):
    STARTED = "started"
    SIGNALLED = "signalled"
    QUEUED = "queued"  # not delivered now (Temporal unreachable, or any failure): kept in the inbox
    DUPLICATE = "duplicate"
    IGNORED = "ignored"  # bots, edits, deletions: never reach the agent
    CLOSED = "closed"  # the thread's conversation has finished
    UNKNOWN = "unknown"  # a thread that is no conversation of ours


# What the adapter tells the customer when the router could not even keep the message (its inbox
# cannot be written): the one case in which a message is not kept, so the customer is asked again.
NOT_KEPT = "Sorry, I could not pass that message on to the agent. Please send it again in a moment."

# What the adapter tells the customer, by result (None: say nothing).
NOTICES: dict[Routed, str | None] = {
    Routed.QUEUED: (
        "Got it. The agent is briefly unavailable and will pick your message up shortly."
    ),
    Routed.CLOSED: (
        "This conversation has finished. Post in the support channel to start a new one."
    ),
}


@dataclass(frozen=True)
class Kept:
    """An event written ahead to the inbox: its platform may be acknowledged now."""

    event_id: str
    seq: int  # its inbox entry
    workflow_id: str


@dataclass(frozen=True)
class Waiting:
    """A kept message held for its adapter (`keep_waiting`), as the inbox has it."""

    kept: Kept
    thread: ThreadRef
    author: Actor
    queued_at: str  # ISO 8601, when it was kept
    attempts: int  # the adapter's failed attempts so far (`note_wait`)
    retry_at: float | None  # time.time() of the adapter's next attempt, if it said


class Router(Protocol):
    """What a chat adapter asks of the router: ConversationRouter is the one that reaches
    Temporal; tests and benchmarks hand adapters a recording one (harness.recording_router)."""

    async def keep(self, message: InboundMessage) -> Kept | Routed:
        """Write a customer message ahead to the inbox, before its platform is acknowledged:
        Kept, or IGNORED / DUPLICATE when it needs no keeping. Raises when it cannot be kept
        (then do not acknowledge it: the platform sends it again)."""
        ...

    async def on_message(self, message: InboundMessage) -> Routed:
        """keep (if not kept already), then deliver. Raises only when the message could not be
        kept: once kept, any failure to deliver it now is QUEUED (the inbox delivers it later)."""
        ...

    async def on_click(self, click: InboundClick) -> Routed: ...

    def seen(self, event_id: str) -> bool: ...

    async def keep_unreadable(self, event: UnreadableEvent) -> None:
        """Keep an acknowledged event that cannot be read as a dead letter; raises when it cannot
        be kept."""
        ...


class WaitingRouter(Router, Protocol):
    """A Router that also holds messages for their adapter: Discord keeps a conversation's opening
    before its thread exists, and releases it once the thread is open."""

    async def keep_waiting(self, message: InboundMessage, waits_for: str) -> Kept | Routed:
        """`keep`, held (with its conversation's later entries) until `release`."""
        ...

    async def waiting(self, waits_for: str) -> list[Waiting]:
        """Every message still held for `waits_for` (after a restart: what to resume)."""
        ...

    async def note_wait(self, kept: Kept, error: str, retry_at: float) -> None:
        """Record the adapter's failed attempt, and when it tries again."""
        ...

    async def release(self, kept: Kept) -> Routed:
        """The adapter is done: deliver it (QUEUED, kept, if not now). Raises when the inbox
        cannot record it; the message stays held."""
        ...

    async def withdraw(self, kept: Kept) -> None:
        """Forget a held message that is gone (its author deleted it)."""
        ...


async def keep_unreadable(
    router: Router, platform: Platform, kind: Literal["message", "click"], raw: Any, reason: str
) -> None:
    """What an adapter does with an acknowledged event it cannot read: the router keeps it as a
    dead letter. One line in the log either way, never a traceback: it came from outside."""
    payload = raw if isinstance(raw, str) else json.dumps(raw, default=repr)
    event = UnreadableEvent(
        platform=platform, kind=kind, payload=_storable(payload), reason=_storable(reason)
    )
    try:
        await router.keep_unreadable(event)
    except Exception as err:
        log.warning(
            "an unreadable %s %s (%s) could not be kept either: %s",
            platform,
            kind,
            reason,
            one_line(err),
        )


def _storable(text: str) -> str:
    # A lone surrogate (JSON's "\ud800") cannot be written as UTF-8: kept as its escape.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def cut(text: str) -> str:
    return text if len(text) <= MAX_SIGNAL_TEXT else text[: MAX_SIGNAL_TEXT - 1] + "…"


def _workflow_of(kind: str, payload: BaseModel) -> str:
    if isinstance(payload, InboundClick):
        return payload.workflow_id
    assert isinstance(payload, ConversationStart | InboundMessage), kind
    return workflow_id_for(payload.thread)


def _decode(pending: Pending) -> BaseModel:
    if pending.kind == "start":
        return ConversationStart.model_validate_json(pending.payload)
    if pending.kind == "message":
        return InboundMessage.model_validate_json(pending.payload)
    if pending.kind == "click":
        return InboundClick.model_validate_json(pending.payload)
    raise ValueError(f"unknown kind {pending.kind!r}")


@dataclass(frozen=True)
class _Round:
    """What one pass over the inbox did."""

    delivered: int
    unreachable: bool  # stopped early: Temporal could not be reached
    next_retry_at: float | None  # the earliest time an entry waiting on its own retry is due


class _Unreachable(Exception):
    """Temporal cannot be used now: nothing is blamed on the entry; everything waits."""


def _earliest(a: float | None, b: float | None) -> float | None:
    return min(a, b) if a is not None and b is not None else (a if b is None else b)


def _unreachable(err: BaseException) -> bool:
    if isinstance(err, RPCError):
        return err.status in _UNREACHABLE
    # The SDK raises RuntimeError("Failed client connect") for a lazy client that cannot connect.
    if isinstance(err, RuntimeError):
        return str(err).startswith("Failed client connect")
    return isinstance(err, ConnectionError | TimeoutError)


class ConversationRouter:
    def __init__(
        self,
        client: Client,
        task_queue: str,
        inbox: Inbox,
        hold_new_conversations: Callable[[], Awaitable[bool]],
        recent: RecentEvents | None = None,
        decider: Literal["policy", "openai"] = "policy",
        timing: Timing | None = None,
        *,
        max_attempts: int = MAX_ATTEMPTS,
        inbox_retry: Backoff = INBOX_RETRY,
        unreachable_retry: Backoff = UNREACHABLE_RETRY,
        meter: MetricMeter | None = None,
        message_updates: bool = True,
        update_accept_timeout: timedelta = UPDATE_ACCEPT_TIMEOUT,
    ) -> None:
        self._client = client
        # False: every customer message goes as the Signal (bench.turn_update compares the two).
        self._message_updates = message_updates
        self._update_accept_timeout = update_accept_timeout
        self._task_queue = task_queue
        self._opened = (meter or MetricMeter.noop).create_counter(OPENED, OPENED_DESCRIPTION)
        self._inbox = inbox
        self._hold = hold_new_conversations
        self._recent = recent or RecentEvents()
        self._decider = decider
        self._timing = timing or Timing()
        self._in_flight: dict[str, asyncio.Future[None]] = {}
        self._kept: dict[str, Kept] = {}  # written ahead, not yet handed to deliver
        self._delivering: set[str] = set()  # their event ids, while `deliver` has them
        # Their entries, and when they were kept: `deliver` takes them right after the ack; the
        # loop leaves them alone for KEPT_GRACE (then takes any a handler never delivered).
        self._kept_seqs: dict[int, float] = {}
        # Entries delivered whose removal failed (the database out just then): removed, not
        # delivered again, when next seen. After a restart one is delivered again, a duplicate the
        # conversation drops (it ignores a message or click id it has seen).
        self._delivered: set[int] = set()
        self._conversations = KeyedLocks()  # one delivery at a time per conversation
        self._wake = asyncio.Event()
        self._delivery_lock = asyncio.Lock()
        self._max_attempts = max_attempts
        self._inbox_retry = inbox_retry
        self._unreachable_retry = unreachable_retry

    # ------------------------------------------------------------------------------------------
    # From the adapters
    # ------------------------------------------------------------------------------------------

    async def keep(self, message: InboundMessage) -> Kept | Routed:
        if message.from_bot or message.edited_or_deleted:
            return Routed.IGNORED
        message = message.model_copy(update={"text": cut(message.text)})
        if not message.opens_thread:
            return await self._keep(message.event_id, "message", message)
        if (kept := self._kept.get(message.event_id)) is not None:
            return kept  # kept at the ack: the hold below was decided then
        return await self._keep(message.event_id, "start", await self._start_of(message))

    async def _start_of(self, message: InboundMessage) -> ConversationStart:
        # Decided now, at arrival: a message kept in the inbox keeps the hold it arrived with.
        return ConversationStart(
            thread=message.thread,
            customer=message.author,
            opening_message_id=message.message_id,
            opening_text=message.text,
            hold_before_refund=await self._hold(),
            decider=self._decider,
            timing=self._timing,
        )

    async def keep_waiting(self, message: InboundMessage, waits_for: str) -> Kept | Routed:
        if message.from_bot or message.edited_or_deleted:
            return Routed.IGNORED
        message = message.model_copy(update={"text": cut(message.text)})
        if not message.opens_thread:
            return await self._keep(message.event_id, "message", message, waits_for)
        start = await self._start_of(message)
        return await self._keep(message.event_id, "start", start, waits_for)

    async def waiting(self, waits_for: str) -> list[Waiting]:
        held = []
        for pending in await self._inbox.waiting(waits_for):
            try:
                payload = _decode(pending)
            except (ValidationError, ValueError) as err:
                await self._bury(pending, f"cannot be read: {one_line(err)}", attempted=False)
                continue
            if isinstance(payload, ConversationStart):
                event_id, thread, author = (
                    payload.opening_message_id,
                    payload.thread,
                    payload.customer,
                )
            else:
                assert isinstance(payload, InboundMessage), pending.kind
                event_id, thread, author = payload.event_id, payload.thread, payload.author
            # As kept here; after a restart a start's event id is its message's (Discord's are).
            kept = next((k for k in self._kept.values() if k.seq == pending.seq), None) or Kept(
                event_id, pending.seq, workflow_id_for(thread)
            )
            self._recent.accept(kept.event_id)  # a redelivery while it waits is a duplicate
            held.append(
                Waiting(kept, thread, author, pending.queued_at, pending.attempts, pending.retry_at)
            )
        return held

    async def note_wait(self, kept: Kept, error: str, retry_at: float) -> None:
        await self._inbox.failed(kept.seq, error, retry_at)

    async def release(self, kept: Kept) -> Routed:
        await self._inbox.ready(kept.seq)
        routed = await self.deliver(kept)
        self._wake.set()  # what its conversation kept meanwhile (a reply) waited behind it
        return routed

    async def withdraw(self, kept: Kept) -> None:
        await self._inbox.remove(kept.seq)
        self._kept.pop(kept.event_id, None)
        self._kept_seqs.pop(kept.seq, None)

    async def on_message(self, message: InboundMessage) -> Routed:
        kept = await self.keep(message)
        return kept if isinstance(kept, Routed) else await self.deliver(kept)

    def seen(self, event_id: str) -> bool:
        """Whether this event was accepted already (kept or delivered): an adapter can drop a
        redelivery before it does any work of its own for it."""
        return self._recent.seen(event_id)

    async def on_click(self, click: InboundClick) -> Routed:
        kept = await self._keep(click.event_id, "click", click)
        return kept if isinstance(kept, Routed) else await self.deliver(kept)

    async def keep_unreadable(self, event: UnreadableEvent) -> None:
        seq = await self._inbox.keep_dead("unreadable", event, event.reason)
        log.warning(
            "a %s %s could not be read (%s); kept as dead letter %d in the inbox",
            event.platform,
            event.kind,
            event.reason,
            seq,
        )

    async def _keep(
        self, event_id: str, kind: str, payload: BaseModel, waits_for: str | None = None
    ) -> Kept | Routed:
        """Write an event ahead once: a redelivery of one kept is a duplicate (or, while the
        first is not yet handed to deliver, that same Kept); one that arrives while the first is
        being written waits for it. Several waiting on a write that failed: the first of them
        to wake writes it again, the others wait for that (a loop, not one wait: two writes of
        one event at once would each end the other's entry)."""
        while (first := self._in_flight.get(event_id)) is not None:
            await asyncio.wait({first})
        if (kept := self._kept.get(event_id)) is not None:
            return kept
        if self._recent.seen(event_id):
            return Routed.DUPLICATE
        done = asyncio.get_running_loop().create_future()
        self._in_flight[event_id] = done
        try:
            workflow_id = _workflow_of(kind, payload)
            with tracing.span("router.keep", workflow_id=workflow_id, inbound=kind):
                # COMMITTED before the platform is acknowledged: this is what "ok" promises.
                seq = await self._inbox.put(kind, payload, workflow_id, waits_for=waits_for)
            kept = self._kept[event_id] = Kept(event_id, seq, workflow_id)
            self._kept_seqs[seq] = time.monotonic()
            # Its handler delivers it right after the ack, unless the handler never runs (Bolt
            # drops an acknowledged request whose authorization call fails): the delivery task
            # looks again once the grace is over, with nothing else to wake it.
            asyncio.get_running_loop().call_later(KEPT_GRACE + 0.1, self._wake.set)
            self._recent.accept(event_id)
            return kept
        finally:
            del self._in_flight[event_id]
            done.set_result(None)

    async def deliver(self, kept: Kept) -> Routed:
        """Deliver a kept event now, after its conversation's earlier entries. QUEUED when it
        must wait (Temporal unreachable, an earlier entry waiting on its retry, a failure): the
        inbox delivers it later, and nothing is lost meanwhile. DUPLICATE for a second delivery
        of one event (a redelivery that came while the first was being delivered)."""
        if kept.event_id in self._delivering:
            return Routed.DUPLICATE
        self._delivering.add(kept.event_id)
        try:
            with tracing.span("router.route", workflow_id=kept.workflow_id) as span:
                try:
                    async with self._conversations.hold(kept.workflow_id):
                        routed = await self._deliver_kept(kept)
                except Exception as err:
                    # Kept, so nothing is lost: the sender must not be told to send it again
                    # (the conversation would take it twice). The inbox's own delivery takes it
                    # once the database (or whatever failed) answers again.
                    log.warning(
                        "kept event %s not delivered now (%s); the inbox delivers it later",
                        kept.event_id,
                        one_line(err),
                    )
                    routed = Routed.QUEUED
                span.set(routed=routed.value)
        finally:
            self._delivering.discard(kept.event_id)
            self._kept.pop(kept.event_id, None)
            self._kept_seqs.pop(kept.seq, None)
        if routed == Routed.QUEUED:
            self._wake.set()
        return routed

    async def _deliver_kept(self, kept: Kept) -> Routed:
        first = await self._inbox.first_for(kept.workflow_id)
        if first is None or first.seq > kept.seq:
            return Routed.SIGNALLED  # the inbox's own delivery took it meanwhile
        if (
            first.seq != kept.seq
            or first.waits_for is not None
            or (first.retry_at is not None and first.retry_at > time.time())
        ):
            return Routed.QUEUED  # an earlier entry of this conversation goes first
        try:
            # Right after the ack, a reply goes as an Update (the fast turn). The background loop
            # sends Signals: a drain after an outage never waits on a Worker for each entry.
            routed = await self._deliver_entry(first, kept.workflow_id, prompt=True)
        except _Unreachable:
            return Routed.QUEUED
        return Routed.QUEUED if routed is None else routed

    async def _deliver_entry(
        self, pending: Pending, workflow_id: str, *, prompt: bool = False
    ) -> Routed | None:
        """Deliver one inbox entry and remove it; None (the entry stays, its failure recorded)
        when it could not be delivered now. Raises _Unreachable when Temporal cannot be used.
        `prompt`: right after its ack, a customer's message goes as an Update first."""
        if pending.seq in self._delivered:
            return Routed.DUPLICATE if await self._remove(pending.seq) else None
        payload = _decode(pending)
        try:
            routed = await self._deliver(pending.kind, payload, prompt=prompt)
        except Exception as err:
            if _unreachable(err):
                log.warning(
                    "could not deliver a %s to %s now (%s); kept in the inbox",
                    pending.kind,
                    workflow_id,
                    one_line(err),
                )
                raise _Unreachable from err
            await self._failed(pending, workflow_id, err)
            return None
        log.info("inbox entry %d delivered to %s: %s", pending.seq, workflow_id, routed)
        # Delivered: whatever the removal meets, this is the event's verdict (a failure here is
        # not a message lost: the sender must not be told to send it again).
        await self._remove(pending.seq)
        return routed

    async def _remove(self, seq: int) -> bool:
        """Remove a delivered entry; False (to be removed when next seen) if it cannot be now."""
        try:
            await self._inbox.remove(seq)
        except Exception as err:
            self._delivered.add(seq)
            self._wake.set()
            log.warning(
                "inbox entry %d delivered but not removed (%s); removed when next seen",
                seq,
                one_line(err),
            )
            return False
        self._delivered.discard(seq)
        return True

    # ------------------------------------------------------------------------------------------
    # To Temporal
    # ------------------------------------------------------------------------------------------

    async def _deliver(self, kind: str, payload: BaseModel, *, prompt: bool = False) -> Routed:
        if kind == "start":
            assert isinstance(payload, ConversationStart)
            return await self._start(payload)
        if kind == "message":
            assert isinstance(payload, InboundMessage)
            message = CustomerMessage(
                message_id=payload.message_id, author=payload.author, text=payload.text
            )
            workflow_id = workflow_id_for(payload.thread)
            if prompt and self._message_updates and await self._update(workflow_id, message):
                return Routed.SIGNALLED
            return await self._signal(workflow_id, RefundConversation.customer_message, message)
        assert isinstance(payload, InboundClick)
        approval = Approval(
            decision=payload.decision,
            actor=payload.actor,
            click_id=payload.click_id,
            round=payload.round,
        )
        return await self._signal(payload.workflow_id, RefundConversation.approval, approval)

    async def _start(self, start: ConversationStart) -> Routed:
        try:
            # Signal-with-start: a retried event or a second bot replica signals the running
            # Workflow instead of starting another (the Workflow drops the repeated message id).
            await self._client.start_workflow(
                RefundConversation.run,
                start,
                id=workflow_id_for(start.thread),
                task_queue=self._task_queue,
                search_attributes=version_attributes(),
                # Its method's name: the Signal's, as @workflow.signal gives it no `name=`.
                start_signal=RefundConversation.customer_message.__name__,
                start_signal_args=[
                    CustomerMessage(
                        message_id=start.opening_message_id,
                        author=start.customer,
                        text=start.opening_text,
                    )
                ],
                # A thread is one conversation: a finished one is never started again.
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                # The window no conversation outlives (docs/versioning.md), held by the server.
                execution_timeout=MAX_CONVERSATION_AGE,
                rpc_timeout=RPC_TIMEOUT,
            )
        except WorkflowAlreadyStartedError:
            return Routed.CLOSED
        # Every opening handed to Temporal: the SDK's public handle does not say whether this
        # call started the run or only signalled it (a redelivered opening counts again).
        self._opened.add(1, {"platform": start.thread.platform})
        return Routed.STARTED

    async def _signal(
        self, workflow_id: str, signal: Callable[[RefundConversation, _Arg], None], arg: _Arg
    ) -> Routed:
        handle = self._client.get_workflow_handle(workflow_id)
        try:
            await handle.signal(signal, arg, rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return await self._closed_or_unknown(workflow_id)
        return Routed.SIGNALLED

    async def _update(self, workflow_id: str, message: CustomerMessage) -> bool:
        """Deliver a reply as an Update: True once a Worker has accepted it (it is then in Event
        History, as a Signal is). False when no Worker accepted it within the bound, it was
        refused (a Worker without the handler), or Temporal answered it with an error: the caller
        sends the Signal, whose answer decides (an unreachable Temporal keeps the entry in the
        inbox).

        The Signal, not the inbox, because a Signal needs no Worker: Temporal can take the
        message now, and what Temporal holds survives the bot's host and is what /refund-status
        reads; the inbox keeps what Temporal cannot take. An Update not accepted in time may still
        be accepted later; the Workflow takes a message id once, whichever copy comes first, and
        the conversation's next entry is delivered only after this one is in history, so order
        holds."""
        handle = self._client.get_workflow_handle(workflow_id)
        seconds = self._update_accept_timeout.total_seconds()
        try:
            async with asyncio.timeout(seconds):
                await handle.start_update(
                    RefundConversation.customer_message_now,
                    message,
                    # One id per message: a retry of this message attaches to the first Update
                    # instead of delivering a second one.
                    id=f"message-{message.message_id}",
                    wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                    rpc_timeout=self._update_accept_timeout,
                )
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # The SDK turns a cancellation into its own error: this call was cancelled from
                # outside (the router stopping), not timed out, so it ends here.
                raise asyncio.CancelledError from None
            log.info(
                "no Worker accepted a message for %s within %.1fs; sent as the Signal",
                workflow_id,
                seconds,
            )
            return False
        except WorkflowUpdateFailedError as err:
            log.info("%s refused the message's Update (%s); sent as the Signal", workflow_id, err)
            return False
        except RPCError as err:
            # Whatever the Update was told, the Signal's own answer decides: delivered, closed or
            # unknown (a describe), or kept in the inbox. Some answers are the Update's alone: the
            # conversation not running, Updates turned off on the cluster (PERMISSION_DENIED;
            # older self-hosted servers), a Workflow's limit on Updates in flight
            # (RESOURCE_EXHAUSTED, left by Updates no Worker took while none ran).
            log.info("the message's Update to %s: %s; sent as the Signal", workflow_id, err)
            return False
        return True

    async def _closed_or_unknown(self, workflow_id: str) -> Routed:
        try:
            description = await self._client.get_workflow_handle(workflow_id).describe(
                rpc_timeout=RPC_TIMEOUT
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return Routed.UNKNOWN
            raise
        running = description.status == WorkflowExecutionStatus.RUNNING
        return Routed.SIGNALLED if running else Routed.CLOSED

    # ------------------------------------------------------------------------------------------
    # The inbox
    # ------------------------------------------------------------------------------------------

    async def deliver_pending(self) -> int:
        """One pass over the inbox: deliver what is due, each conversation's entries in order.
        Returns how many were delivered."""
        return (await self._delivery_round()).delivered

    async def _delivery_round(self) -> _Round:
        delivered, next_retry_at = 0, None
        async with self._delivery_lock:
            now = time.time()
            held: set[str] = set()  # conversations with an earlier entry still waiting
            for pending in await self._inbox.pending():
                try:
                    payload = _decode(pending)
                except (ValidationError, ValueError) as err:
                    # Written by another version, say: no retry will ever read it.
                    await self._bury(pending, f"cannot be read: {one_line(err)}", attempted=False)
                    continue
                workflow_id = _workflow_of(pending.kind, payload)
                if workflow_id in held:
                    continue
                if pending.waits_for is not None:
                    held.add(workflow_id)  # its adapter releases it (`release`)
                    continue
                kept_at = self._kept_seqs.get(pending.seq)
                if kept_at is not None and time.monotonic() - kept_at < KEPT_GRACE:
                    held.add(workflow_id)  # its ack is going out; `deliver` follows at once
                    next_retry_at = _earliest(next_retry_at, time.time() + KEPT_GRACE)
                    continue
                if pending.retry_at is not None and pending.retry_at > now:
                    held.add(workflow_id)
                    next_retry_at = _earliest(next_retry_at, pending.retry_at)
                    continue
                async with self._conversations.hold(workflow_id):
                    first = await self._inbox.first_for(workflow_id)
                    if first is None or first.seq != pending.seq:
                        continue  # delivered meanwhile, right after its ack
                    try:
                        # A trace of its own: the handler that kept it has long returned.
                        with tracing.span(
                            "inbox.deliver",
                            "consumer",
                            workflow_id=workflow_id,
                            inbound=pending.kind,
                            inbox_entry=pending.seq,
                            attempt=pending.attempts + 1,
                        ) as span:
                            routed = await self._deliver_entry(pending, workflow_id)
                            span.set(routed=routed.value if routed else "failed")
                    except _Unreachable:
                        log.info("Temporal unreachable; the inbox waits")
                        return _Round(delivered, True, next_retry_at)
                if routed is None:
                    held.add(workflow_id)
                    retry = await self._inbox.first_for(workflow_id)
                    if retry is not None and retry.retry_at is not None:
                        next_retry_at = _earliest(next_retry_at, retry.retry_at)
                    elif pending.seq in self._delivered:  # its removal: again in a second
                        next_retry_at = _earliest(next_retry_at, time.time() + 1.0)
                    continue
                delivered += 1
        return _Round(delivered, False, next_retry_at)

    async def _failed(self, pending: Pending, workflow_id: str, err: Exception) -> float | None:
        """Record a failed attempt: when to try again, or None once it is a dead letter."""
        attempts = pending.attempts + 1
        why = one_line(err)
        if attempts >= self._max_attempts:
            await self._bury(pending, why)
            return None
        delay = self._inbox_retry.delay(attempts)
        log.warning(
            "inbox entry %d (a %s for %s) failed, attempt %d of %d (%s); next try in %.0fs",
            pending.seq,
            pending.kind,
            workflow_id,
            attempts,
            self._max_attempts,
            why,
            delay,
        )
        retry_at = time.time() + delay
        await self._inbox.failed(pending.seq, why, retry_at)
        return retry_at

    async def _bury(self, pending: Pending, why: str, *, attempted: bool = True) -> None:
        await self._inbox.bury(pending.seq, why, attempted=attempted)
        log.error(
            "inbox entry %d (a %s for %s, queued %s) will not be delivered: %s; kept as a dead "
            "letter in the inbox",
            pending.seq,
            pending.kind,
            pending.workflow_id or "?",
            pending.queued_at,
            why,
        )

    async def run_delivery(self) -> None:
        """Background task: deliver the inbox whenever something is queued or due; while Temporal
        is unreachable, try again with backoff."""
        depth = await self._inbox.depth()
        if depth.dead:
            log.warning("inbox: %s (see the dead_letters table of the inbox database)", depth)
        unreachable = failures = 0
        while True:
            self._wake.clear()
            try:
                round_ = await self._delivery_round()
            except Exception as err:
                # The inbox's own database out (stopped, restarting): this task is the only one
                # that delivers what was kept, so it outlives the outage and tries again.
                failures += 1
                pause = self._unreachable_retry.delay(failures)
                log.warning("inbox: cannot read it (%s); again in %.1fs", one_line(err), pause)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=pause)
                continue
            failures = 0
            unreachable = unreachable + 1 if round_.unreachable else 0
            wait: float | None = None
            if round_.unreachable:
                wait = self._unreachable_retry.delay(unreachable)
            elif round_.next_retry_at is not None:
                wait = max(0.0, round_.next_retry_at - time.time())
            if wait is None:
                await self._wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=wait)

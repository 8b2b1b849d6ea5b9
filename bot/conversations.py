"""The platform-neutral conversation router: what every chat adapter shares.

An adapter turns its platform's events into `InboundMessage` / `InboundClick` and hands them here.
The router drops what must never reach the agent (bots, edits, deletions, redeliveries), derives the
Workflow ID from the thread, and starts (signal-with-start) or signals the conversation. When
Temporal cannot be reached, the message is kept in the local inbox and delivered later, in order.
The adapter shows the customer the notice that goes with the result.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agent.models import (
    MAX_TEXT_CHARS,
    Actor,
    Approval,
    ConversationStart,
    ConversationView,
    CustomerMessage,
    ThreadRef,
)
from agent.workflow import RefundConversation
from bot.dedup import RecentEvents
from bot.ids import workflow_id_for
from bot.inbox import Inbox

log = logging.getLogger(__name__)

# Text is cut to this many characters before it becomes a Signal (the Workflow cuts again).
MAX_SIGNAL_TEXT = MAX_TEXT_CHARS
# How long one call to Temporal may take before the message goes to the inbox instead. Short, so
# an adapter's reply to the customer never waits on a Temporal that is down.
RPC_TIMEOUT = timedelta(seconds=5)
# How long a click's round check may wait on the Workflow's answer (a Query needs a live Worker);
# without an answer the click is sent anyway, and the Workflow drops it if its round has passed.
ROUND_CHECK_TIMEOUT = timedelta(seconds=2)
_CHECK_SKIPPED = (RPCError, WorkflowQueryFailedError, RuntimeError, ConnectionError, TimeoutError)
_UNREACHABLE = {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED}


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


class Routed(StrEnum):
    STARTED = "started"
    SIGNALLED = "signalled"
    QUEUED = "queued"  # Temporal unreachable: kept in the inbox
    DUPLICATE = "duplicate"
    IGNORED = "ignored"  # bots, edits, deletions: never reach the agent
    CLOSED = "closed"  # the thread's conversation has finished
    UNKNOWN = "unknown"  # a thread that is no conversation of ours
    STALE = "stale"  # a click on an escalation round that is no longer open: not sent


# What the adapter tells the customer, by result (None: say nothing).
NOTICES: dict[Routed, str | None] = {
    Routed.QUEUED: (
        "Got it. The agent is briefly unavailable and will pick your message up shortly."
    ),
    Routed.CLOSED: (
        "This conversation has finished. Post in the support channel to start a new one."
    ),
}


# What the adapter tells the clicker privately, by result of a click (None: say nothing).
CLICK_NOTICES: dict[Routed, str] = {
    Routed.QUEUED: "Your decision is recorded; the agent is briefly unavailable and will pick it "
    "up shortly.",
    Routed.CLOSED: "This conversation has already finished; your click changed nothing.",
    Routed.UNKNOWN: "This button belongs to no conversation I know; your click changed nothing.",
    Routed.STALE: "These buttons were already answered (look for the newest ones in the thread); "
    "your click changed nothing.",
}


def cut(text: str) -> str:
    return text if len(text) <= MAX_SIGNAL_TEXT else text[: MAX_SIGNAL_TEXT - 1] + "…"


def _unreachable(err: BaseException) -> bool:
    if isinstance(err, RPCError):
        return err.status in _UNREACHABLE
    # The SDK raises RuntimeError("Failed client connect") for a lazy client that cannot connect.
    return isinstance(err, RuntimeError | ConnectionError | TimeoutError)


class ConversationRouter:
    def __init__(
        self,
        client: Client,
        task_queue: str,
        inbox: Inbox,
        hold_new_conversations: Callable[[], Awaitable[bool]],
        recent: RecentEvents | None = None,
        decider: Literal["policy", "openai"] = "policy",
    ) -> None:
        self._client = client
        self._task_queue = task_queue
        self._inbox = inbox
        self._hold = hold_new_conversations
        self._recent = recent or RecentEvents()
        self._decider = decider
        self._in_flight: dict[str, asyncio.Future[None]] = {}
        self._wake = asyncio.Event()
        self._delivery_lock = asyncio.Lock()

    # ------------------------------------------------------------------------------------------
    # From the adapters
    # ------------------------------------------------------------------------------------------

    async def on_message(self, message: InboundMessage) -> Routed:
        if message.from_bot or message.edited_or_deleted:
            return Routed.IGNORED
        message = message.model_copy(update={"text": cut(message.text)})
        if message.opens_thread:
            # Decided now, at arrival: a message kept in the inbox keeps the hold it arrived with.
            start = ConversationStart(
                thread=message.thread,
                customer=message.author,
                opening_message_id=message.message_id,
                opening_text=message.text,
                hold_before_refund=await self._hold(),
                decider=self._decider,
            )
            return await self._accept(message.event_id, "start", start)
        return await self._accept(message.event_id, "message", message)

    async def on_click(self, click: InboundClick) -> Routed:
        return await self._accept(click.event_id, "click", click)

    async def check_click(self, click: InboundClick) -> Routed | None:
        """Before an adapter marks a clicked escalation as decided: CLOSED when the conversation
        has finished, STALE when the click's round is no longer open (answered already, or buttons
        of an earlier round), None when the click may count or nobody could say.

        Only a courtesy, so the adapter can tell the clicker privately and leave the message as
        the Workflow wrote it; the Workflow itself drops a click whose round has passed.
        """
        handle = self._client.get_workflow_handle(click.workflow_id)
        try:
            description = await handle.describe(rpc_timeout=ROUND_CHECK_TIMEOUT)
            if description.status != WorkflowExecutionStatus.RUNNING:
                return Routed.CLOSED
            if click.round is None:
                return None  # older buttons: the Workflow binds the click to the open round
            view = await handle.query(RefundConversation.view, rpc_timeout=ROUND_CHECK_TIMEOUT)
        except _CHECK_SKIPPED as err:
            # Not found, unreachable, or no Worker to answer the Query: the click goes ahead.
            log.info("round check of %s skipped: %s", click.workflow_id, err)
            return None
        assert isinstance(view, ConversationView)
        return Routed.STALE if view.escalation_round != click.round else None

    async def _accept(self, event_id: str, kind: str, payload: BaseModel) -> Routed:
        """Deliver (or queue) an event once: a redelivery of an accepted event is a duplicate; a
        redelivery that arrives while the first is still being handled waits for its verdict."""
        if (first := self._in_flight.get(event_id)) is not None:
            await asyncio.wait({first})
        if self._recent.seen(event_id):
            return Routed.DUPLICATE
        done = asyncio.get_running_loop().create_future()
        self._in_flight[event_id] = done
        try:
            return await self._deliver_or_queue(event_id, kind, payload)
        finally:
            del self._in_flight[event_id]
            done.set_result(None)

    async def _deliver_or_queue(self, event_id: str, kind: str, payload: BaseModel) -> Routed:
        # Order matters: while anything waits in the inbox, later messages queue behind it.
        if await self._inbox.size() == 0:
            try:
                routed = await self._deliver(kind, payload)
            except Exception as err:
                if not _unreachable(err):
                    raise  # not accepted: a platform retry of this event will be processed
                log.warning("Temporal unreachable (%s); keeping %s in the inbox", err, kind)
            else:
                self._recent.accept(event_id)
                return routed
        await self._inbox.put(kind, payload)
        self._recent.accept(event_id)
        self._wake.set()
        return Routed.QUEUED

    # ------------------------------------------------------------------------------------------
    # To Temporal
    # ------------------------------------------------------------------------------------------

    async def _deliver(self, kind: str, payload: BaseModel) -> Routed:
        if kind == "start":
            assert isinstance(payload, ConversationStart)
            return await self._start(payload)
        if kind == "message":
            assert isinstance(payload, InboundMessage)
            signal = CustomerMessage(
                message_id=payload.message_id, author=payload.author, text=payload.text
            )
            return await self._signal(workflow_id_for(payload.thread), "customer_message", signal)
        assert isinstance(payload, InboundClick)
        approval = Approval(
            decision=payload.decision,
            actor=payload.actor,
            click_id=payload.click_id,
            round=payload.round,
        )
        return await self._signal(payload.workflow_id, "approval", approval)

    async def _start(self, start: ConversationStart) -> Routed:
        try:
            # Signal-with-start: a retried event or a second bot replica signals the running
            # Workflow instead of starting another (the Workflow drops the repeated message id).
            await self._client.start_workflow(
                RefundConversation.run,
                start,
                id=workflow_id_for(start.thread),
                task_queue=self._task_queue,
                start_signal="customer_message",
                start_signal_args=[
                    CustomerMessage(
                        message_id=start.opening_message_id,
                        author=start.customer,
                        text=start.opening_text,
                    )
                ],
                # A thread is one conversation: a finished one is never started again.
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                rpc_timeout=RPC_TIMEOUT,
            )
        except WorkflowAlreadyStartedError:
            return Routed.CLOSED
        return Routed.STARTED

    async def _signal(self, workflow_id: str, name: str, arg: BaseModel) -> Routed:
        handle = self._client.get_workflow_handle(workflow_id)
        try:
            await handle.signal(name, arg, rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return await self._closed_or_unknown(workflow_id)
        return Routed.SIGNALLED

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
        """Deliver kept messages in order; stop at the first that still cannot be delivered."""
        delivered = 0
        async with self._delivery_lock:
            for pending in await self._inbox.pending():
                payload: BaseModel
                if pending.kind == "start":
                    payload = ConversationStart.model_validate_json(pending.payload)
                elif pending.kind == "message":
                    payload = InboundMessage.model_validate_json(pending.payload)
                else:
                    payload = InboundClick.model_validate_json(pending.payload)
                try:
                    routed = await self._deliver(pending.kind, payload)
                except Exception as err:
                    if _unreachable(err):
                        break
                    # A message Temporal refuses for good would block every later one; log it.
                    log.exception("dropping undeliverable inbox entry %d", pending.seq)
                    routed = Routed.IGNORED
                log.info("inbox entry %d delivered: %s", pending.seq, routed)
                await self._inbox.remove(pending.seq)
                delivered += 1
        return delivered

    async def run_delivery(self, retry_every: float = 2.0) -> None:
        """Background task: deliver the inbox whenever something is queued, retrying until it
        empties."""
        while True:
            if await self._inbox.size():
                await self.deliver_pending()
            self._wake.clear()
            if await self._inbox.size():
                await asyncio.sleep(retry_every)
            else:
                await self._wake.wait()

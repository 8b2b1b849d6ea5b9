"""A customer's reply as an Update, on a real dev server with a real Worker and the real router.

    router.deliver -> the customer_message_update Update, accepted by a polling Worker
                   ... none accepts it within UPDATE_ACCEPT_TIMEOUT, or it is refused -> the Signal

Here: a reply reaches a polling Worker as an Update and is read back from history; no Worker
polls; replies sent together keep their order; one delivered twice is taken once; a closed
conversation, and one closing while the reply comes."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agent.decoded_history import decoded_history
from agent.history import what_survives
from agent.intake import MESSAGE_UPDATE
from agent.models import CustomerMessage, ThreadRef
from agent.sayings import FINISHED
from agent.settings import AgentSettings
from agent.stores.sqlite import SqliteDatabase
from agent.workflow import RefundConversation
from bot.conversations import (
    NOTICES,
    UPDATE_ACCEPT_TIMEOUT,
    ConversationRouter,
    InboundMessage,
    Routed,
)
from bot.ids import workflow_id_for
from bot.inbox import Inbox
from bot.local.terminal import PEOPLE
from bot.local.thread_store import LocalMessage, LocalThreadStore
from harness.codec import TEST_CONVERTER
from harness.conditions import wait_for
from harness.events import customer_message
from harness.inproc import running_worker
from tests.support.outcome_gate import OutcomeGate
from worker.runner import build_worker

CUSTOMER = PEOPLE["customer"]
OPENED = "Was the package opened?"
DAMAGED = "What was damaged?"


async def _no_hold() -> bool:
    return False


def _router(client: Client, task_queue: str, tmp_path: Path) -> ConversationRouter:
    return ConversationRouter(client, task_queue, Inbox(SqliteDatabase(tmp_path)), _no_hold)


async def _bot_texts(threads: LocalThreadStore, thread_id: str) -> list[str]:
    return [m.text for m in await threads.messages(thread_id) if m.author_is_bot]


async def _asked(threads: LocalThreadStore, thread_id: str, *texts: str) -> None:
    async def probe() -> bool:
        return await _bot_texts(threads, thread_id) == list(texts)

    await wait_for(probe, timeout=30, what=f"the agent to have posted exactly {texts}")


async def _delivered(client: Client, workflow_id: str) -> list[tuple[str, CustomerMessage]]:
    """Every customer message in the conversation's history, in order: how it came, and what."""
    history = await decoded_history(
        await client.get_workflow_handle(workflow_id).fetch_history(), TEST_CONVERTER
    )
    found = []
    for event in history.events:
        if (message := customer_message(event, TEST_CONVERTER)) is not None:
            how = (
                "update"
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
                else "signal"
            )
            found.append((how, message))
    return found


class _Thread:
    """One thread of the local channel, under a workspace of its own: the session's server keeps
    every test's conversations, and a Workflow ID is derived from the thread."""

    def __init__(self, router: ConversationRouter, threads: LocalThreadStore) -> None:
        self.router, self.threads = router, threads
        self.workspace = f"turn-{uuid.uuid4().hex[:8]}"
        self.thread_id = ""

    @property
    def workflow_id(self) -> str:
        return workflow_id_for(self._ref())

    def _ref(self) -> ThreadRef:
        return ThreadRef(
            platform="local", workspace=self.workspace, channel="support", thread=self.thread_id
        )

    def _inbound(self, message: LocalMessage, opens: bool) -> InboundMessage:
        return InboundMessage(
            event_id=f"{self.workspace}-{message.message_id}",
            thread=self._ref(),
            message_id=message.message_id,
            author=CUSTOMER,
            text=message.text,
            opens_thread=opens,
        )

    async def open(self, text: str) -> None:
        root = await self.threads.open_thread("support", CUSTOMER.user_id, text)
        self.thread_id = root.thread_id
        assert await self.router.on_message(self._inbound(root, True)) == Routed.STARTED

    async def written(self, text: str) -> InboundMessage:
        reply = await self.threads.add_reply(self.thread_id, CUSTOMER.user_id, text)
        return self._inbound(reply, False)

    async def reply(self, text: str) -> Routed:
        return await self.router.on_message(await self.written(text))


async def test_a_reply_reaches_a_polling_worker_as_an_update(
    client: Client, agent_settings: AgentSettings, threads: LocalThreadStore, tmp_path: Path
) -> None:
    async with running_worker(client, agent_settings, threads) as queue:
        thread = _Thread(_router(client, queue, tmp_path), threads)
        await thread.open("please refund order 1234")
        workflow_id = thread.workflow_id
        await _asked(threads, thread.thread_id, OPENED)
        assert await thread.reply("Yes") == Routed.SIGNALLED
        await _asked(threads, thread.thread_id, OPENED, DAMAGED)
        delivered = await _delivered(client, workflow_id)
        # The opening rides on signal-with-start; the reply is an accepted Update, and only that.
        assert [(how, m.text) for how, m in delivered] == [
            ("signal", "please refund order 1234"),
            ("update", "Yes"),
        ]
        # What survives (/refund-status) reads the answer from the Update, with no Worker asked.
        assert (await what_survives(client, workflow_id)).answers == {"item_opened": "Yes"}
        await client.get_workflow_handle(workflow_id).terminate("test over")


async def test_a_reply_while_no_worker_runs_is_taken_once_when_one_comes(
    client: Client, agent_settings: AgentSettings, threads: LocalThreadStore, tmp_path: Path
) -> None:
    """An Update needs a Worker to accept it. With none, the router does not wait for one past
    UPDATE_ACCEPT_TIMEOUT: the reply goes as the Signal, and the Worker that comes later takes
    it once (the Update, if it is delivered as well, carries the same message id)."""
    queue = f"no-worker-{uuid.uuid4().hex[:8]}"
    thread = _Thread(_router(client, queue, tmp_path), threads)
    await thread.open("please refund order 1234")
    workflow_id = thread.workflow_id
    bound = UPDATE_ACCEPT_TIMEOUT.total_seconds() + 2  # the wait, and the Signal after it
    began = asyncio.get_running_loop().time()
    # Without the bound, the SDK asks the server again and again until a Worker accepts: the
    # router would hang on this conversation for as long as no Worker runs.
    routed = await asyncio.wait_for(thread.reply("Yes"), timeout=bound + 10)
    took = asyncio.get_running_loop().time() - began
    assert routed == Routed.SIGNALLED and took < bound
    # In Temporal's history as the Signal, so the inbox has let it go: nothing is lost with the
    # bot's disk, and /refund-status sees it before any Worker runs.
    assert await Inbox(SqliteDatabase(tmp_path)).size() == 0
    assert [(how, m.text) for how, m in await _delivered(client, workflow_id)] == [
        ("signal", "please refund order 1234"),
        ("signal", "Yes"),
    ]
    async with running_worker(client, agent_settings, threads, queue):
        # "Yes" answers the first question: the second is asked, and nothing is asked twice.
        await _asked(threads, thread.thread_id, OPENED, DAMAGED)
        handle = client.get_workflow_handle(workflow_id)
        view = await handle.query(RefundConversation.view)
        assert view.answers == {"item_opened": "Yes"} and view.queued_messages == 0
        assert (await what_survives(client, workflow_id)).answers == {"item_opened": "Yes"}
        await handle.terminate("test over")


async def test_replies_sent_together_are_taken_in_order(
    client: Client, agent_settings: AgentSettings, threads: LocalThreadStore, tmp_path: Path
) -> None:
    async with running_worker(client, agent_settings, threads) as queue:
        router = _router(client, queue, tmp_path)
        thread = _Thread(router, threads)
        await thread.open("please refund order 4500")  # escalates: still open after both
        workflow_id = thread.workflow_id
        await _asked(threads, thread.thread_id, OPENED)
        texts = ["Yes", "Split seam", "and it smells"]
        replies = [await thread.written(t) for t in texts]
        routed = await asyncio.gather(*(router.on_message(r) for r in replies))
        assert routed == [Routed.SIGNALLED] * 3
        delivered = await _delivered(client, workflow_id)
        assert [m.text for _how, m in delivered[1:]] == texts
        assert {how for how, _m in delivered[1:]} == {"update"}
        # The Workflow took them in that order: the first answers the first question, the
        # second the next.
        survived = await wait_for(
            lambda: _answers_once_two(client, workflow_id), timeout=30, what="both answers"
        )
        assert survived == {"item_opened": "Yes", "damage": "Split seam"}
        await client.get_workflow_handle(workflow_id).terminate("test over")


async def _answers_once_two(client: Client, workflow_id: str) -> dict[str, str] | None:
    answers = (await what_survives(client, workflow_id)).answers
    return answers if len(answers) == 2 else None


async def test_a_reply_delivered_twice_is_taken_once(
    client: Client, agent_settings: AgentSettings, threads: LocalThreadStore, tmp_path: Path
) -> None:
    """The same reply from two bot replicas (each with its own inbox and memory of events), and
    once more as the Signal the router falls back on: one Update in history, one answer."""
    async with running_worker(client, agent_settings, threads) as queue:
        thread = _Thread(_router(client, queue, tmp_path / "one"), threads)
        await thread.open("please refund order 4500")  # escalates: still open at the end
        workflow_id = thread.workflow_id
        await _asked(threads, thread.thread_id, OPENED)
        yes = await thread.written("Yes")
        assert await thread.router.on_message(yes) == Routed.SIGNALLED
        await _asked(threads, thread.thread_id, OPENED, DAMAGED)
        other = _router(client, queue, tmp_path / "two")
        assert await other.on_message(yes) == Routed.SIGNALLED
        handle = client.get_workflow_handle(workflow_id)
        await handle.signal(
            RefundConversation.customer_message,
            CustomerMessage(message_id=yes.message_id, author=CUSTOMER, text="Yes"),
        )
        # The next reply is what the damage question gets: had a copy of "Yes" been taken, it
        # would have answered that question first.
        assert await thread.reply("Split seam") == Routed.SIGNALLED
        survived = await wait_for(
            lambda: _answers_once_two(client, workflow_id), timeout=30, what="both answers"
        )
        assert survived == {"item_opened": "Yes", "damage": "Split seam"}
        delivered = [(how, m.text) for how, m in await _delivered(client, workflow_id)]
        # The second replica's Update carried the first one's id: the server answered it with the
        # Update already accepted, so history holds one.
        assert delivered[1:] == [("update", "Yes"), ("signal", "Yes"), ("update", "Split seam")]
        await handle.terminate("test over")


async def test_a_reply_to_a_closed_conversation_is_answered_as_the_signal_is(
    client: Client, agent_settings: AgentSettings, threads: LocalThreadStore, tmp_path: Path
) -> None:
    async with running_worker(client, agent_settings, threads) as queue:
        thread = _Thread(_router(client, queue, tmp_path), threads)
        await thread.open("please refund order 1234")
        await _asked(threads, thread.thread_id, OPENED)
        await client.get_workflow_handle(thread.workflow_id).terminate("closed by staff")
        # The Update finds no running conversation; the Signal's path says which: closed, and
        # nothing waits in the inbox to be retried.
        assert await thread.reply("Yes") == Routed.CLOSED
        assert await Inbox(SqliteDatabase(tmp_path)).size() == 0


def test_the_update_is_the_one_the_workflow_defines() -> None:
    # The router names the Update by its method; the history reader by its name: one and the same.
    assert RefundConversation.customer_message_now._defn.name == MESSAGE_UPDATE


async def test_a_reply_while_the_outcome_is_posted_is_answered(
    client: Client, agent_settings: AgentSettings, threads: LocalThreadStore, tmp_path: Path
) -> None:
    """An Update admitted while the run says its last word does not keep the run open, as a
    Signal would (the server drops an Update no workflow task took when the run closes): the run
    completes, and the router's Signal then finds the conversation closed. The adapter tells the
    customer the sentence the Workflow says to a late Signal, and nothing waits in the inbox."""
    gate = OutcomeGate(threads)
    queue = f"gated-{uuid.uuid4().hex[:8]}"
    router = ConversationRouter(
        client,
        queue,
        Inbox(SqliteDatabase(tmp_path)),
        _no_hold,
        # Long enough that the run's end, not the router's bound, decides what happens here.
        update_accept_timeout=timedelta(seconds=30),
    )
    async with await build_worker(client, queue, agent_settings, {"local": gate}):
        thread = _Thread(router, threads)
        await thread.open("please refund order 9999")  # no such order: denied at once
        await asyncio.wait_for(gate.reached.wait(), 30)
        thanks = await thread.written("thanks!")
        delivery = asyncio.create_task(router.on_message(thanks))
        await wait_for(
            lambda: _admitted(client, thread.workflow_id, f"message-{thanks.message_id}"),
            timeout=10,
            what="the Update admitted while the outcome is posted",
        )
        gate.open.set()
        assert await asyncio.wait_for(delivery, 30) == Routed.CLOSED
        assert NOTICES[Routed.CLOSED] == FINISHED
        delivered = await _delivered(client, thread.workflow_id)
        assert [m.text for _how, m in delivered] == ["please refund order 9999"]
        assert await Inbox(SqliteDatabase(tmp_path)).size() == 0


async def _admitted(client: Client, workflow_id: str, update_id: str) -> bool:
    """Whether the server holds this Update (admitted, or further): NOT_FOUND until then."""
    request = PollWorkflowExecutionUpdateRequest(
        namespace=client.namespace,
        update_ref=UpdateRef(
            workflow_execution=WorkflowExecution(workflow_id=workflow_id), update_id=update_id
        ),
        wait_policy=WaitPolicy(
            lifecycle_stage=UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
        ),
    )
    try:
        await client.workflow_service.poll_workflow_execution_update(
            request, timeout=timedelta(seconds=1)
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True

"""Drive one local-platform conversation against a real Temporal server, as the router would."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Literal

from temporalio.client import Client, WorkflowHandle

from agent.models import (
    Actor,
    Approval,
    ConversationStart,
    ConversationView,
    CustomerMessage,
    ThreadRef,
    Timing,
)
from agent.versions import MAX_CONVERSATION_AGE, version_attributes
from agent.workflow import RefundConversation
from bot.local.thread_store import LocalMessage, LocalThreadStore
from harness.conditions import wait_for

CUSTOMER = Actor(platform="local", user_id="customer", display_name="Nyghtowl")
SUPPORT = Actor(platform="local", user_id="support", display_name="Sam (support)")


@dataclass
class LocalConversation:
    client: Client
    threads: LocalThreadStore
    task_queue: str
    customer: Actor = CUSTOMER
    handle: WorkflowHandle | None = None
    thread_id: str = ""
    _seen_bot: int = field(default=0)

    async def open(
        self,
        text: str,
        *,
        hold: bool = False,
        decider: Literal["policy", "openai"] = "policy",
        timing: Timing | None = None,
    ) -> WorkflowHandle:
        root = await self.threads.open_thread("support", self.customer.user_id, text)
        self.thread_id = root.thread_id
        start = ConversationStart(
            thread=ThreadRef(
                platform="local", workspace="local", channel="support", thread=root.thread_id
            ),
            customer=self.customer,
            opening_message_id=root.message_id,
            opening_text=text,
            hold_before_refund=hold,
            decider=decider,
            timing=timing or Timing(),
        )
        self.handle = await self.client.start_workflow(
            RefundConversation.run,
            start,
            id=f"local-test-{uuid.uuid4().hex[:12]}-{root.thread_id}",
            task_queue=self.task_queue,
            search_attributes=version_attributes(),
            execution_timeout=MAX_CONVERSATION_AGE,
            start_signal="customer_message",
            start_signal_args=[
                CustomerMessage(message_id=root.message_id, author=self.customer, text=text)
            ],
        )
        return self.handle

    async def bot_messages(self) -> list[LocalMessage]:
        return [m for m in await self.threads.messages(self.thread_id) if m.author_is_bot]

    async def next_bot_message(self, timeout: float = 20.0) -> LocalMessage:
        """The next message the agent posts in the thread (each returned once)."""

        async def probe() -> LocalMessage | None:
            messages = await self.bot_messages()
            return messages[self._seen_bot] if len(messages) > self._seen_bot else None

        message = await wait_for(probe, timeout=timeout, what="the agent's next message")
        self._seen_bot += 1
        return message

    async def reply(
        self,
        text: str,
        author: Actor | None = None,
        message_id: str | None = None,
        *,
        update: bool = False,
    ) -> str:
        """The customer's reply, as the customer_message Signal, or (`update`) as the Update the
        router sends first, returning once a Worker has accepted it."""
        author = author or self.customer
        row = await self.threads.add_reply(self.thread_id, author.user_id, text)
        mid = message_id or row.message_id
        assert self.handle is not None
        message = CustomerMessage(message_id=mid, author=author, text=text)
        if update:
            await self.handle.execute_update(
                RefundConversation.customer_message_now, message, id=f"message-{mid}"
            )
        else:
            await self.handle.signal(RefundConversation.customer_message, message)
        return mid

    async def answer_the_questions(self) -> None:
        """The plush python's two questions, each checked, answered "Yes" and "Split seam"."""
        assert (await self.next_bot_message()).text == "Was the package opened?"
        await self.reply("Yes")
        assert (await self.next_bot_message()).text == "What was damaged?"
        await self.reply("Split seam")

    async def answer_until_decided(self, timeout: float = 60.0) -> LocalMessage:
        """Answer whatever the agent asks (the plush python's answers: "Yes", "Split seam"; an
        order number's question with none) until it escalates or says the outcome; that message.
        What it only tells (a reminder, a wait on our side, the hold) is passed over."""
        answers = {"Was the package opened?": "Yes", "What was damaged?": "Split seam"}
        while True:
            message = await self.next_bot_message(timeout=timeout)
            if message.kind in ("escalation", "outcome"):
                return message
            if message.kind != "question":
                continue
            await self.reply(answers.get(message.text, "I don't know"))

    async def click(
        self, decision: Literal["approve", "deny"], actor: Actor = SUPPORT, round: int | None = None
    ) -> None:
        """A click on the escalation's buttons; `round` as the buttons carry it (None: buttons
        posted before rounds existed)."""
        assert self.handle is not None
        await self.handle.signal(
            RefundConversation.approval,
            Approval(decision=decision, actor=actor, click_id=uuid.uuid4().hex, round=round),
        )

    async def view(self) -> ConversationView:
        assert self.handle is not None
        return await self.handle.query(RefundConversation.view)

    async def wait_phase(self, phase: str, timeout: float = 20.0) -> ConversationView:
        async def probe() -> ConversationView | None:
            view = await self.view()
            return view if view.phase == phase else None

        return await wait_for(probe, timeout=timeout, what=f"phase {phase}")

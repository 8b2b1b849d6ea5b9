"""The agent as a plain in-process loop, in a process of its own: the docs page's Demo 1.

    customer's message -> decide -> ask (post, wait for the next message) | look up -> ... -> decide
      -> "Next: issue the refund" -> [held] -> authorize -> refund -> the outcome, posted
    a message it has no memory of -> the ledger (paid, no refund) -> "please start the return again"

The same steps as RefundConversation, built from refund-bot's own Activities (the decide step, the
lookups, the live authorization, the refund, the thread's poster), each run through the SDK's
ActivityEnvironment (an activity context, as a Worker gives) and called in order by an ordinary
loop. Its working memory is a Python list: when the process dies, nothing of it survives. A new
process is a new run (new message keys, a new refund idempotency key), as a plain service would be.

`python -m demo.plain_loop` is what `/refund-demo` runs beside the durable conversation
(demo/side_by_side.py): the customer's messages arrive on stdin, one JSON line each
(`{"text": …, "message_id": …}`; `{"release": true}` lets a held refund go ahead), and the loop
reports what it does on stdout, one JSON line each (`LoopEvent`). bench/plain_loop.py runs the same
loop with the customer's replies read from the local thread.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel
from temporalio.testing import ActivityEnvironment

from agent.activities.authorize import AuthorizeActivities
from agent.activities.decide import DecideActivities
from agent.activities.lookups import LookupActivities
from agent.activities.notify import NotifyActivities, ThreadPoster
from agent.activities.refund import RefundActivities
from agent.activities.rules import apply_refund_rules
from agent.effect_owner import effect_owner
from agent.models import (
    AGENT_PRINCIPAL,
    Actor,
    Answer,
    AuthorizeInput,
    DecideInput,
    HistoryLookup,
    LookupCustomerInput,
    LookupOrderInput,
    MessageKey,
    MessageKind,
    Observation,
    OrderLookup,
    OutboundMessage,
    Platform,
    PolicyInput,
    RefundRequest,
    RulesInput,
    ThreadRef,
)
from agent.policy import order_number_from
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from agent.stores.domain import DomainStore
from agent.stores.grants import GrantStore
from agent.stores.ledger import Ledger
from bot.local.thread_store import LocalThreadStore

T = TypeVar("T")
log = logging.getLogger(__name__)
MAX_TURNS = 10
NEXT_REFUND = "Next: issue the refund."
START_OVER = (
    "I have no record of our conversation: your answers and my next step were in the process "
    "that stopped. {owner} shows order {order} paid, with no refund: no refund request reached "
    "it. Please start the return again."
)


class CustomerLine(BaseModel):
    """One message from the customer (or the presenter's release), as the loop is handed it."""

    text: str = ""
    message_id: str = ""
    release: bool = False


class LoopEvent(BaseModel):
    """What the loop did, one JSON line on stdout: its parent paces the demo by these."""

    event: Literal["ready", "asked", "next_refund", "start_over", "outcome"]
    text: str = ""


@dataclass
class LoopParts:
    """The Activities the loop calls, built from settings: the same a Worker runs."""

    decide: DecideActivities
    lookups: LookupActivities
    authorize: AuthorizeActivities
    refund: RefundActivities
    notify: NotifyActivities
    settings: AgentSettings


def loop_parts(settings: AgentSettings, posters: dict[str, ThreadPoster]) -> LoopParts:
    database = database_for(settings)
    ledger = Ledger(database)
    notify = NotifyActivities(posters)
    return LoopParts(
        decide=DecideActivities(settings, notify.post_to_thread),
        lookups=LookupActivities(DomainStore(database), effect_owner(settings, ledger)),
        authorize=AuthorizeActivities(GrantStore(database)),
        refund=RefundActivities(settings, ledger),
        notify=notify,
        settings=settings,
    )


class PlainLoop:
    """One thread's agent, as a plain loop. `conversation_id` names it at the owners (the ledger's
    refunds, the posts' keys) as a Workflow ID names a durable one."""

    def __init__(
        self,
        parts: LoopParts,
        thread: ThreadRef,
        customer: Actor,
        conversation_id: str,
        next_line: Callable[[], Awaitable[CustomerLine]],
        *,
        calls: Path,
        hold: bool = False,
        crash_after: int = 0,
        report: Callable[[LoopEvent], None] = lambda event: None,
    ) -> None:
        self.parts = parts
        self.thread = thread
        self.customer = customer
        self.conversation_id = conversation_id
        self.next_line = next_line
        self.calls = calls
        self.hold = hold
        self.crash_after = crash_after
        self.report = report
        self.run_id = uuid.uuid4().hex  # a new process is a new run: nothing carries over
        self.steps = 0
        self.seq = 0
        self.memory: list[Observation] = []  # EXECUTION STATE, in this process only
        self.env = ActivityEnvironment()

    async def step(self, name: str, call: Callable[..., Awaitable[T]], arg: Any) -> T:
        with self.calls.open("a") as calls:
            calls.write(name + "\n")  # before the call: a call the crash interrupts still counts
        result = await self.env.run(call, arg)
        self.steps += 1
        if self.steps == self.crash_after:
            os.kill(os.getpid(), signal.SIGKILL)  # the crash: nothing after this step ran
        return result

    async def post(self, kind: MessageKind, text: str) -> str:
        """Post in the thread (EXTERNAL EFFECT); the post's platform message id."""
        self.seq += 1
        key = MessageKey(workflow_id=self.conversation_id, run_id=self.run_id, seq=self.seq)
        message = OutboundMessage(thread=self.thread, key=key, kind=kind, text=text)
        posted = await self.step("post_to_thread", self.parts.notify.post_to_thread, message)
        return posted.platform_message_id

    async def serve(self, order_number: str | None = None) -> None:
        """Answer the customer's messages until a conversation ends. `order_number`: the order
        the thread is about (its root names it), for a message the loop has no memory of."""
        self.report(LoopEvent(event="ready"))
        while True:
            line = await self.next_line()
            if order_number_from(line.text, []) is not None:
                await self.converse(line.text)
                return
            await self.start_over(order_number)

    async def start_over(self, order_number: str | None) -> None:
        """A message in a thread this process has no memory of. All it can read is the order and
        the refunds on its payment, from their owner: no refund there, so the customer is asked to
        start again; one there (made by a process before this one), so the customer is told."""
        order = None
        if order_number:
            lookup = await self.step(
                "lookup_order",
                self.parts.lookups.lookup_order,
                LookupOrderInput(customer=self.customer, order_number=order_number),
            )
            order = lookup.order
        if order is not None and order.refunds:
            first = order.refunds[0]
            text = (
                f"I have no record of our conversation, but {self._owner()} shows order "
                f"{order.order_number} refunded (reference {first.refund_id})."
            )
        else:
            owner = self._owner()
            text = START_OVER.format(owner=owner[0].upper() + owner[1:], order=order_number or "?")
        await self.post("info", text)
        self.report(LoopEvent(event="start_over", text=text))

    def _owner(self) -> str:
        return "the ledger" if self.parts.settings.stripe_api_key is None else "Stripe"

    async def converse(self, opening: str) -> None:
        parts = self.parts
        tools: dict[str, tuple[Callable[..., Awaitable[Observation]], type[BaseModel]]] = {
            "lookup_order": (parts.lookups.lookup_order, LookupOrderInput),
            "lookup_customer_history": (parts.lookups.lookup_customer_history, LookupCustomerInput),
            "check_refund_policy": (parts.lookups.check_refund_policy, PolicyInput),
        }
        step = None
        for turn in range(1, MAX_TURNS + 1):
            step = await self.step(
                "decide_next_step",
                parts.decide.decide_next_step,
                DecideInput(
                    opening_text=opening,
                    memory=self.memory,
                    turn=turn,
                    decider=parts.settings.agent_decider,
                ),
            )
            if step.source != "policy":
                with self.calls.open("a") as calls:
                    calls.write("model_call\n")  # the live model was asked: a paid call
            if step.action == "decide":
                break
            if step.action == "ask":
                question = step.question or ""
                await self.post("question", question)
                self.report(LoopEvent(event="asked", text=question))
                reply = await self.next_line()
                self.memory.append(
                    Answer(
                        # An "ask" step names one of the policy's questions (a QuestionId).
                        question_id=step.question_id or "",  # type: ignore[arg-type]
                        text=reply.text,
                        message_id=reply.message_id,
                    )
                )
            else:
                call, input_type = tools[step.tool or ""]
                fields: dict[str, Any] = {"customer": self.customer}
                if input_type is not LookupCustomerInput:
                    fields["order_number"] = order_number_from(opening, self.memory) or ""
                self.memory.append(await self.step(step.tool or "", call, input_type(**fields)))
        lookup = next((o for o in self.memory if isinstance(o, OrderLookup)), None)
        order = lookup.order if lookup else None
        # The same refund rules the Workflow applies: the decider's step is only a proposal.
        decision = await self.step(
            "apply_refund_rules",
            apply_refund_rules,
            RulesInput(
                proposal=step.outcome if step and step.action == "decide" else None,
                decider=step.source if step else "policy",
                order_number=order_number_from(opening, self.memory),
                order=lookup,
                history=next((o for o in self.memory if isinstance(o, HistoryLookup)), None),
                asked_on=date.today(),
            ),
        )
        if decision.outcome != "approve" or order is None:
            await self.finish(f"No refund: {decision.reason}")
            return
        if self.hold:
            await self.post("info", NEXT_REFUND)
            self.report(LoopEvent(event="next_refund", text=NEXT_REFUND))
            while not (await self.next_line()).release:  # the demo's pause, in memory too
                pass
        check = await self.step(
            "authorize_refund",
            parts.authorize.authorize_refund,
            AuthorizeInput(
                principal=AGENT_PRINCIPAL,
                role="refund_agent",
                amount_cents=order.amount_cents,
                workflow_id=self.conversation_id,
            ),
        )
        if not check.allowed:
            await self.finish(f"No refund: {check.reason}")
            return
        result = await self.step(
            "issue_refund",
            parts.refund.issue_refund,
            RefundRequest(
                idempotency_key=f"plain-{self.conversation_id}-{self.run_id}",
                workflow_id=self.conversation_id,
                order_number=order.order_number,
                payment_ref=order.payment_ref,
                amount_cents=order.amount_cents,
                currency=order.currency,
            ),
        )
        await self.finish(f"Your refund is complete: {result.refund_id} ({result.status}).")

    async def finish(self, text: str) -> None:
        await self.post("outcome", text)
        self.report(LoopEvent(event="outcome", text=text))


async def _stdin_lines() -> Callable[[], Awaitable[CustomerLine]]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def next_line() -> CustomerLine:
        raw = await reader.readline()
        if not raw:
            raise SystemExit(0)  # the parent closed our stdin: nothing more will come
        return CustomerLine.model_validate_json(raw)

    return next_line


def _print(event: LoopEvent) -> None:
    print(event.model_dump_json(), flush=True)


def thread_poster(
    platform: Platform, settings: AgentSettings, closing: contextlib.AsyncExitStack
) -> dict[str, ThreadPoster]:
    """The outbound half of the one platform the loop's thread is on (its SDK only)."""
    if platform == "slack":
        from bot.slack.outbound import SlackThreadPoster
        from bot.slack.settings import SlackSettings

        slack = SlackThreadPoster.from_settings(SlackSettings())
        closing.push_async_callback(slack.close)
        return {"slack": slack}
    if platform == "discord":
        from bot.discord.outbound import DiscordThreadPoster
        from bot.discord.settings import DiscordSettings

        discord = DiscordThreadPoster.from_settings(DiscordSettings())
        closing.push_async_callback(discord.close)
        return {"discord": discord}
    return {"local": LocalThreadStore(database_for(settings))}


async def main(args: argparse.Namespace) -> None:
    settings = AgentSettings()
    thread = ThreadRef.model_validate_json(args.thread)
    async with contextlib.AsyncExitStack() as connections:
        loop = PlainLoop(
            loop_parts(settings, thread_poster(thread.platform, settings, connections)),
            thread,
            Actor.model_validate_json(args.customer),
            args.conversation,
            await _stdin_lines(),
            calls=args.calls,
            hold=args.hold,
            report=_print,
        )
        await loop.serve(args.order)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--thread", required=True, help="the ThreadRef, as JSON")
    parser.add_argument("--customer", required=True, help="the customer's Actor, as JSON")
    parser.add_argument("--conversation", required=True, help="its id at the owners")
    parser.add_argument("--order", help="the order the thread is about (its root names it)")
    parser.add_argument("--calls", type=Path, required=True, help="each step's name is appended")
    parser.add_argument("--hold", action="store_true", help="wait for a release before refunding")
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(main(parse_args()))

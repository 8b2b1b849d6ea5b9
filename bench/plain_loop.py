"""refund-bot's agent as a plain in-process loop: the same steps, no durable execution.

    python -m bench.plain_loop --data-dir D --thread T --customer ID --opening TEXT
        [--crash-after K] --calls FILE
      -> decide -> ask (post, read the customer's reply from the thread) | look up -> ... ->
         authorize -> refund -> post the outcome; its working memory lives in this process only

What bench.crash_cost compares refund-bot with: the docs page's Demo 1 (the reference's
naive_refund.py), built from refund-bot's own Activities (the offline policy, the stores, the
ledger, the local thread's poster) called in order by an ordinary loop, each through the SDK's
ActivityEnvironment (which gives it an activity context, as a Worker would). A new process starts
the conversation over: a new run, so new message keys and a new refund idempotency key, as a plain
service would have. --crash-after K SIGKILLs this process once its K-th step has returned. Each
step's name is appended to --calls before it runs, so the calls made read off the file afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from temporalio.testing import ActivityEnvironment

from agent.activities.authorize import AuthorizeActivities
from agent.activities.decide import DecideActivities
from agent.activities.lookups import LookupActivities
from agent.activities.notify import NotifyActivities
from agent.activities.refund import RefundActivities
from agent.effect_owner import effect_owner
from agent.models import (
    AGENT_PRINCIPAL,
    Actor,
    Answer,
    AuthorizeInput,
    DecideInput,
    LookupCustomerInput,
    LookupOrderInput,
    MessageKey,
    Observation,
    OrderLookup,
    OutboundMessage,
    PolicyInput,
    RefundRequest,
    ThreadRef,
)
from agent.policy import order_number_from
from agent.settings import AgentSettings
from refund_bot.wiring import local_thread_store
from worker.runner import prepare_stores

T = TypeVar("T")
REPLY_TIMEOUT = 300.0


class PlainLoop:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.run_id = uuid.uuid4().hex  # a new process is a new run: nothing carries over
        self.steps = 0
        self.seq = 0
        self.memory: list[Observation] = []  # EXECUTION STATE, in this process only
        self.customer = Actor(platform="local", user_id=args.customer)
        self.thread = ThreadRef(
            platform="local", workspace="local", channel="support", thread=args.thread
        )
        self.env = ActivityEnvironment()

    async def step(self, name: str, call: Callable[..., Awaitable[T]], arg: Any) -> T:
        with self.args.calls.open("a") as calls:
            calls.write(name + "\n")
        result = await self.env.run(call, arg)
        self.steps += 1
        if self.steps == self.args.crash_after:
            os.kill(os.getpid(), signal.SIGKILL)  # the crash: nothing after this step ran
        return result

    async def post(self, kind: str, text: str) -> int:
        """Post in the thread; the post's seq (the customer's reply comes after it)."""
        self.seq += 1
        key = MessageKey(workflow_id=self.args.thread, run_id=self.run_id, seq=self.seq)
        message = OutboundMessage(thread=self.thread, key=key, kind=kind, text=text)  # type: ignore[arg-type]
        posted = await self.step("post_to_thread", self.notify.post_to_thread, message)
        return int(posted.platform_message_id.removeprefix("local-"))

    async def reply_after(self, seq: int) -> Any:
        deadline = asyncio.get_running_loop().time() + REPLY_TIMEOUT
        while asyncio.get_running_loop().time() < deadline:
            for message in await self.threads.messages(self.args.thread, after_seq=seq):
                if not message.author_is_bot:
                    return message
            await asyncio.sleep(0.05)
        raise TimeoutError("the customer did not answer")

    async def run(self) -> None:
        settings = AgentSettings(_env_file=None, data_dir=self.args.data_dir)  # type: ignore[call-arg]
        domain, grants, ledger = await prepare_stores(settings)
        self.threads = local_thread_store(settings)
        self.notify = NotifyActivities({"local": self.threads})
        decide = DecideActivities(settings)
        lookups = LookupActivities(domain, effect_owner(settings, ledger))
        tools = {
            "lookup_order": (lookups.lookup_order, LookupOrderInput),
            "lookup_customer_history": (lookups.lookup_customer_history, LookupCustomerInput),
            "check_refund_policy": (lookups.check_refund_policy, PolicyInput),
        }
        opening = self.args.opening
        for turn in range(1, 11):
            step = await self.step(
                "decide_next_step",
                decide.decide_next_step,
                DecideInput(opening_text=opening, memory=self.memory, turn=turn),
            )
            if step.action == "decide":
                break
            if step.action == "ask":
                seq = await self.post("question", step.question or "")
                reply = await self.reply_after(seq)
                answer = Answer(
                    question_id=step.question_id, text=reply.text, message_id=str(reply.seq)
                )  # type: ignore[arg-type]
                self.memory.append(answer)
            else:
                call, input_type = tools[step.tool or ""]
                fields: dict[str, Any] = {"customer": self.customer}
                if input_type is not LookupCustomerInput:
                    fields["order_number"] = order_number_from(opening, self.memory) or ""
                self.memory.append(await self.step(step.tool or "", call, input_type(**fields)))
        lookup = next(o for o in self.memory if isinstance(o, OrderLookup))
        order = lookup.order
        if step.outcome != "approve" or order is None:
            await self.post("outcome", f"no refund: {step.outcome}")
            return
        check = await self.step(
            "authorize_refund",
            AuthorizeActivities(grants).authorize_refund,
            AuthorizeInput(
                principal=AGENT_PRINCIPAL,
                role="refund_agent",
                amount_cents=order.amount_cents,
                workflow_id=self.args.thread,
            ),
        )
        if not check.allowed:
            await self.post("outcome", f"no refund: {check.reason}")
            return
        result = await self.step(
            "issue_refund",
            RefundActivities(settings, ledger).issue_refund,
            RefundRequest(
                idempotency_key=f"plain-{self.args.thread}-{self.run_id}",
                workflow_id=self.args.thread,
                order_number=order.order_number,
                payment_ref=order.payment_ref,
                amount_cents=order.amount_cents,
                currency=order.currency,
            ),
        )
        await self.post("outcome", f"refund {result.status}: {result.refund_id}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--customer", required=True)
    parser.add_argument("--opening", required=True)
    parser.add_argument("--crash-after", type=int, default=0)
    parser.add_argument("--calls", type=Path, required=True)
    asyncio.run(PlainLoop(parser.parse_args()).run())

"""`refund-bot demo`: the docs page's story, unattended, in the local support channel.

    fresh customer and order -> customer asks -> two answers -> lookups -> held before the refund
    -> SIGKILL -> what survives, read with no Worker -> new Worker -> released -> one refund

Each run tells it with a fresh copy of the demo customer and order (demo/parts.py), so
the story is the same again and again on one data directory. The customer asks
for a refund; the agent asks two questions, looks up the order and the customer's history, and
chooses to issue the refund; the demo hold stops it one step before the effect. Then the Worker is
SIGKILLed, what survives is read from Event History while no Worker is alive, a new Worker starts,
the hold is released, and the refund goes through once. The decide step is AGENT_DECIDER's: the
offline policy, or the live model. The story follows what the agent says, in whatever order: the
customer answers each question, and if the agent escalates (a live model may, even before it asks
anything), the support agent approves in the thread and the story carries on. Exit status 0 only
if every invariant held: no question asked twice, no decide step or lookup run again, one refund.
"""

from __future__ import annotations

import asyncio
import time

from agent.effect_owner import refunds_at_owner
from agent.history import what_survives
from agent.models import Actor
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from bot.conversations import ConversationRouter
from bot.ids import workflow_id_for
from bot.inbox import Inbox
from bot.local.terminal import PEOPLE, LocalChannel, inbound, render, thread_ref
from bot.local.thread_store import LocalMessage, LocalThreadStore
from demo.parts import (
    ANSWER_TO,
    LOOP_STEPS,
    TIMEOUT,
    DemoFailed,
    RunningStack,
    decider_label,
    held_view,
    history_counts,
    place_demo_customer,
)


def banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


async def _next_bot_message(threads: LocalThreadStore, thread_id: str, after: int) -> LocalMessage:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        for message in await threads.messages(thread_id, after_seq=after):
            if message.author_is_bot:
                return message
        await asyncio.sleep(0.1)
    raise DemoFailed(f"the agent said nothing in {thread_id} within {TIMEOUT:.0f}s")


async def _say(
    router: ConversationRouter, threads: LocalThreadStore, thread: str, text: str, customer: Actor
) -> None:
    message = await threads.add_reply(thread, customer.user_id, text)
    print(f"[{thread}] {customer.label}: {text}", flush=True)
    await router.on_message(inbound(message, customer))


async def _until_held(
    stack: RunningStack,
    router: ConversationRouter,
    threads: LocalThreadStore,
    thread: str,
    customer: Actor,
    seen: int,
) -> int:
    """Follow what the agent says, in whatever order it says it, until it holds before the
    refund: the customer answers each question, the support agent approves an escalation.
    Returns the hold's place in the thread."""
    while True:
        message = await _next_bot_message(threads, thread, seen)
        seen = message.seq
        print(render(message), flush=True)
        if message.kind == "question":
            answer = ANSWER_TO.get(message.text)
            if answer is None:
                raise DemoFailed(
                    f"the agent asked what the story has no answer to: {message.text!r}"
                )
            await _say(router, threads, thread, answer, customer)
        elif message.kind == "escalation":
            # The support agent clicks Approve, through the terminal channel's own click.
            support = LocalChannel(threads, router, stack.commands)
            support.me, support.thread = PEOPLE["support"], thread
            await support.handle("1")
        elif message.kind == "info" and "Holding before the refund" in message.text:
            return seen
        elif message.kind != "info":  # an outcome before the hold: denied, or refunded unheld
            raise DemoFailed(f"the agent did not stop before the refund: {message.text!r}")


async def crash_and_resume(stack: RunningStack, settings: AgentSettings) -> int:
    """The story on `stack` (its supervised Worker is the one killed); 0 if every invariant held."""
    try:
        return await _story(stack, settings)
    except DemoFailed as err:
        print(f"FAIL the story stopped: {err}", flush=True)
        return 1


async def _story(stack: RunningStack, settings: AgentSettings) -> int:
    threads = LocalThreadStore(database_for(settings))
    presenter = PEOPLE["presenter"]
    temporal, supervisor = stack.temporal, stack.supervisor
    assert supervisor is not None  # the composition root tells it on a supervised Worker
    print(f"Temporal at {stack.temporal.address}; Web UI: {stack.web_ui}", flush=True)
    print(f"Worker pid {supervisor.pid} is polling {temporal.task_queue!r}", flush=True)
    print(f"Decide step: {decider_label(settings)}", flush=True)

    async def hold() -> bool:
        return True  # the demo always holds one step before the refund

    router = ConversationRouter(
        stack.client,
        temporal.task_queue,
        Inbox(database_for(settings)),
        hold,
        decider=settings.agent_decider,
        timing=settings.timing(),
    )
    customer, order = await place_demo_customer(settings)
    opening = f"please refund order {order.order_number}"
    print(
        f"A fresh order for this run: {order.order_number} ({order.item}, "
        f"${order.amount_cents / 100:,.2f}), paid with {order.payment_ref}",
        flush=True,
    )

    banner("A customer writes in the support channel")
    root = await threads.open_thread("support", customer.user_id, opening)
    thread = root.thread_id
    workflow_id = workflow_id_for(thread_ref(thread))
    print(f"[{thread}] {customer.label}: {opening}", flush=True)
    await router.on_message(inbound(root, customer))
    print(f"Workflow {workflow_id} (open it in the Web UI)", flush=True)
    seen = await _until_held(stack, router, threads, thread, customer, root.seq)
    view = await held_view(stack.client, workflow_id)
    before = await history_counts(stack.client, workflow_id)
    print(f"Next action: {view.next_action}", flush=True)

    banner("WORKER GONE: SIGKILL, then read what survives from Temporal")

    async def while_no_worker() -> None:
        survivors = await what_survives(stack.client, workflow_id)
        owner = await refunds_at_owner(settings, workflow_id, order.payment_ref)
        print("Read from Temporal just now (no Worker alive):", flush=True)
        print(f"  customer answers: {len(survivors.answers)} {survivors.answers}", flush=True)
        print(f"  completed lookups: {len(survivors.lookups)} {survivors.lookups}", flush=True)
        print(f"  next action: {survivors.next_action}", flush=True)
        print(f"  {owner.owner}: refunds {owner.refunds or 'none'}", flush=True)

    report = await supervisor.restart(kill=True, while_down=while_no_worker)
    print(
        f"New Worker: old pid {report.old_pid}, new pid {report.new_pid}, ready in "
        f"{report.seconds_to_ready:.2f}s",
        flush=True,
    )

    banner("Released: the same loop, rebuilt from Event History")
    print((await stack.commands.refund_release(presenter, workflow_id)).text, flush=True)
    outcome = await _next_bot_message(threads, thread, seen)
    print(render(outcome), flush=True)
    await stack.client.get_workflow_handle(workflow_id).result()

    after = await history_counts(stack.client, workflow_id)
    questions = [m for m in await threads.messages(thread) if m.kind == "question"]
    refunds = (await refunds_at_owner(settings, workflow_id, order.payment_ref)).refunds
    banner("What the run shows")
    checks = {
        "NO REPEATED QUESTIONS": len(questions) == len({q.text for q in questions}),
        "NO LOOP RESTART (no decide step or lookup ran again)": all(
            after.get(step, 0) == before.get(step, 0) for step in LOOP_STEPS
        ),
        "ONE REFUND": len(refunds) == 1,
        "Your refund is complete": outcome.text.startswith("Your refund is complete"),
    }
    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}", flush=True)
    print(f"Refund at the owner: {refunds}", flush=True)
    return 0 if all(checks.values()) else 1

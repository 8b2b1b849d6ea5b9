"""What the two demos share: the demo customer and order, the answers, and reading the conversation.

    refund-bot demo (demo/crash_and_resume.py), /refund-demo (demo/side_by_side.py)
      -> place_demo_customer, ANSWERS -> held_view (the hold) -> history_counts (what ran, per step)

Each telling places a fresh copy of the demo customer (Nyghtowl: the same tenure and one earlier
refund, made at the effect's owner) and a fresh order (the plush python of order 1234, under a new
number, paid where the refund will go), so the story is the same again and again on one data
directory, and the README's story with the seeded customer is left as it was.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import Counter
from dataclasses import replace
from datetime import date, timedelta
from typing import Protocol

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agent.models import Actor, ConversationView, OrderDetails, Platform
from agent.policy import QUESTIONS
from agent.settings import DEMO_CUSTOMER, AgentSettings, TemporalSettings
from agent.stores.databases import database_for
from agent.stores.domain import SEED_ORDERS, DomainStore
from agent.stores.ledger import Ledger, SeedRefund
from agent.stripe_setup import pay_order
from bot.commands import Commands
from bot.conversations import ConversationRouter
from bot.inbox import Inbox
from bot.local.terminal import PEOPLE
from worker.supervisor import WorkerSupervisor

# The docs page's order, and the demo customer's earlier refund: each run places one like each.
PLUSH_PYTHON = next(order for order in SEED_ORDERS if order.order_number == "1234")
EARLIER_REFUND = next(order for order in SEED_ORDERS if order.refunded_days_ago is not None)
ANSWERS = ("Yes", "Split seam")
# The customer's answer to each question the agent may ask, in whatever order it asks them.
ANSWER_TO = {QUESTIONS["item_opened"]: ANSWERS[0], QUESTIONS["damage"]: ANSWERS[1]}
TIMEOUT = 60.0
LOOP_STEPS = ("decide_next_step", "lookup_order", "lookup_customer_history", "check_refund_policy")


class DemoFailed(Exception):
    """The story could not be told to the end; the message says where it stopped."""


class RunningStack(Protocol):
    """What a story told in the terminal uses of the running stack (the composition root's
    refund_bot.stack.Stack, with its supervised Worker)."""

    @property
    def temporal(self) -> TemporalSettings: ...

    @property
    def client(self) -> Client: ...

    @property
    def router(self) -> ConversationRouter: ...

    @property
    def commands(self) -> Commands: ...

    @property
    def inbox(self) -> Inbox: ...

    @property
    def supervisor(self) -> WorkerSupervisor | None: ...

    @property
    def web_ui(self) -> str | None: ...


async def held_view(client: Client, workflow_id: str, within: float = TIMEOUT) -> ConversationView:
    """The conversation once its hold notice's post has completed and it waits for the release.
    (The notice is in the thread a moment before its Activity completes and the Workflow moves
    on: asked too early, the Workflow would still be posting.)"""
    handle = client.get_workflow_handle(workflow_id)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        view = await handle.query("view", result_type=ConversationView)
        if view.held:
            return view
        await asyncio.sleep(0.05)
    raise DemoFailed(f"the conversation did not reach its hold within {within:.0f}s")


def fresh_demo_account(platform: Platform = "local") -> Actor:
    """The demo customer on an account of their own that no person holds.

    64 random bits: with 24, a benchmark placing 3,000 customers in one data directory drew one
    user id twice (the accounts table refused it), about a one-in-four chance at that size.
    """
    return PEOPLE["customer"].model_copy(
        update={"platform": platform, "user_id": f"demo-{secrets.token_hex(8)}"}
    )


async def place_demo_customer(
    settings: AgentSettings, platform: Platform = "local"
) -> tuple[Actor, OrderDetails]:
    """A fresh copy of the demo customer (an account on `platform` that no person holds), with
    their earlier refund and a fresh order to refund, paid where the refunds go: the offline
    ledger, or test-mode PaymentIntents in Stripe test mode (as `refund-bot stripe-setup` pays
    the seed's)."""
    domain = DomainStore(database_for(settings))
    customer = fresh_demo_account(platform)
    customer_id = await domain.place_customer(DEMO_CUSTOMER, customer)
    order = await domain.place_order(replace(PLUSH_PYTHON, customer_id=customer_id))
    earlier = await domain.place_order(replace(EARLIER_REFUND, customer_id=customer_id))
    refund = SeedRefund(
        payment_ref=earlier.payment_ref,
        amount_cents=earlier.amount_cents,
        currency=earlier.currency,
        order_number=earlier.order_number,
        refunded_on=(
            date.today() - timedelta(days=EARLIER_REFUND.refunded_days_ago or 0)
        ).isoformat(),
    )
    if settings.stripe_api_key is None:
        ledger = Ledger(database_for(settings))
        await ledger.seed_payments(
            [(o.payment_ref, o.amount_cents, o.currency) for o in (order, earlier)]
        )
        await ledger.seed_refunds([refund])
        return customer, order
    await pay_order(settings, domain, earlier, refund)
    intent = await pay_order(settings, domain, order)
    return customer, order.model_copy(update={"payment_ref": intent})


def decider_label(settings: AgentSettings) -> str:
    if settings.agent_decider == "openai":
        return f"the model {settings.openai_model} (AGENT_DECIDER=openai)"
    return "the offline policy (AGENT_DECIDER=policy)"


async def history_counts(client: Client, workflow_id: str) -> Counter[str]:
    """How many times each step (Activity or local activity) was recorded."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    counts: Counter[str] = Counter()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            counts[event.activity_task_scheduled_event_attributes.activity_type.name] += 1
        elif event.marker_recorded_event_attributes.marker_name == "core_local_activity":
            data = event.marker_recorded_event_attributes.details["data"].payloads[0].data
            counts[json.loads(data)["activity_type"]] += 1
    return counts

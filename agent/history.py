"""What survives: a conversation's position as the Workflow recorded it, read with no Worker alive.

    describe(): the memo (ConversationView, under MEMO_KEY) + status + pending Activities
        -> Survivors: answers, lookups, the order, next action, where the refund stands

The Workflow writes its view to its memo whenever it changes before it waits (agent.workflow
_record); the server keeps it, so this needs no Worker (a Query would). The memo is encrypted by
the payload codec like every payload; the client's converter decrypts it, and a missing key
fails here, naming the key id.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from temporalio.api.enums.v1 import PendingWorkflowTaskState
from temporalio.client import Client, WorkflowExecutionStatus

from agent.models import (
    MEMO_KEY,
    ConversationOutcome,
    ConversationStart,
    ConversationView,
    Disposition,
    OrderDetails,
    RefundResult,
    ThreadRef,
)


class RefundProgress(BaseModel):
    state: str  # not started | in flight | succeeded | failed (or the owner's own status)
    attempts: int = 0
    refund: RefundResult | None = None
    last_failure: str | None = None


class Survivors(BaseModel):
    workflow_id: str
    closed: bool
    answers: dict[str, str]
    lookups: list[str]
    next_action: str
    refund: RefundProgress
    decide_calls: int
    customer_signals: int
    order: OrderDetails | None = None
    outcome: ConversationOutcome | None = None
    decision: Disposition | None = None  # the refund rules' answer (None until given)
    model_note: str | None = None  # the live model's summary: staff only, never a customer
    thread: ThreadRef | None = None
    next_deadline: str | None = None  # the soonest timer and what it is for
    taken_over: str | None = None  # who has taken it over, and since when
    waiting_on: str | None = None  # a step waiting out an outage: which, since when, why


TASK_IN_FLIGHT_POLLS, TASK_IN_FLIGHT_POLL_S = 40, 0.05  # up to 2 s

# What each step waits on, as an operator names it.
DEPENDENCIES = {
    "decide_next_step": "the model",
    "lookup_order": "the order store and the refunds' owner",
    "lookup_customer_history": "the order store and the refunds' owner",
    "check_refund_policy": "the order store",
    "authorize_refund": "the role grants",
    "issue_refund": "the refund's owner (Stripe or the ledger)",
    "post_to_thread": "the chat platform",
    "edit_thread_message": "the chat platform",
}


def _waiting_on(pending: list[Any]) -> str | None:
    """A pending Activity that has failed at least once: what it waits on, since when, how often
    it was tried and its last failure's first line."""
    for activity in pending:
        if activity.attempt < 2 and not activity.HasField("last_failure"):
            continue
        name = activity.activity_type.name
        since = activity.scheduled_time.ToDatetime().strftime("%Y-%m-%d %H:%M:%S UTC")
        failure = (activity.last_failure.message or "\n").splitlines()[0]
        return (
            f"{DEPENDENCIES.get(name, name)} ({name}) since {since}, attempt {activity.attempt}"
            + (f": {failure[:160]}" if failure else "")
        )
    return None


def _refund(view: ConversationView, closed: bool, pending: list[Any]) -> RefundProgress:
    if view.refund is not None:
        return RefundProgress(
            state=view.refund.status, attempts=view.refund.attempt, refund=view.refund
        )
    outcome = view.outcome
    if outcome is not None and outcome.status == "failed":
        return RefundProgress(state="failed", last_failure=outcome.detail)
    if view.phase == "refunding" and not closed:
        attempts = [p.attempt for p in pending if p.activity_type.name == "issue_refund"]
        return RefundProgress(state="in flight", attempts=max(attempts, default=0))
    return RefundProgress(state="not started")


async def what_survives(client: Client, workflow_id: str) -> Survivors:
    """Read a conversation's position from Temporal now; needs no Worker."""
    handle = client.get_workflow_handle(workflow_id)
    description = await handle.describe()
    # A post made inside a workflow task is in the thread before the task's record is: a task in
    # flight is waited for (briefly: one held by a dead Worker is not waited out).
    for _ in range(TASK_IN_FLIGHT_POLLS):
        task = description.raw_description.pending_workflow_task
        if task.state != PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED:
            break
        await asyncio.sleep(TASK_IN_FLIGHT_POLL_S)
        description = await handle.describe()
    closed = description.status not in (None, WorkflowExecutionStatus.RUNNING)
    view = await description.memo_value(MEMO_KEY, None, type_hint=ConversationView)
    if view is None:  # started before Workflow 1.3 recorded it: its thread, from its input
        async for first in handle.fetch_history_events():
            started = first.workflow_execution_started_event_attributes.input.payloads
            [start] = await client.data_converter.decode(started, [ConversationStart])
            break
        return Survivors(
            workflow_id=workflow_id,
            closed=closed,
            answers={},
            lookups=[],
            next_action="not recorded: the conversation started before Workflow 1.3",
            refund=RefundProgress(state="not recorded"),
            decide_calls=0,
            customer_signals=0,
            thread=start.thread,
        )
    pending = list(description.raw_description.pending_activities)
    next_action = view.next_action
    if closed:
        status = view.outcome.status if view.outcome else "not completed"
        next_action = f"none: closed ({status})"
    taken = view.taken_over_by
    return Survivors(
        workflow_id=workflow_id,
        closed=closed,
        answers=view.answers,
        lookups=view.lookups,
        next_action=next_action,
        refund=_refund(view, closed, pending),
        decide_calls=view.decide_calls,
        customer_signals=view.customer_messages,
        order=view.order,
        outcome=view.outcome,
        decision=view.disposition,
        model_note=view.model_note,
        thread=view.thread,
        next_deadline=None if closed else view.next_deadline,
        taken_over=f"{taken.label} since {view.taken_over_since}" if taken and not closed else None,
        waiting_on=_waiting_on(pending),
    )

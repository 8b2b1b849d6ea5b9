"""What survives: a conversation's position rebuilt from Event History alone.

Event History lives in the Temporal Service, not in a Worker, so this works while no Worker is
alive (a Query would not). It reads the recorded inputs and results of the Activities: the latest
decide step's input holds the working memory (answers and lookups), its result is the next action,
and the refund Activity's events say where the effect stands. The server holds that history
encrypted: `what_survives` decodes it through the client's converter (agent/decoded_history.py)
before reading it, and a missing key fails there, naming the key id.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter

from agent.codec import ENCODING
from agent.decoded_history import decoded_history
from agent.models import (
    AgentStep,
    Answer,
    ConversationOutcome,
    DecideInput,
    OrderDetails,
    OrderLookup,
    RefundResult,
)

LOOKUP_TOOLS = ("lookup_order", "lookup_customer_history", "check_refund_policy")


class RefundProgress(BaseModel):
    state: str  # not started | in flight | succeeded | failed
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


class _Activity(BaseModel):
    name: str
    input: Any = None
    result: Any = None
    completed: bool = False
    failed: str | None = None


def _decode(converter: DataConverter, payloads: Any, type_hint: type) -> Any:
    payloads = list(payloads)
    if any(p.metadata.get("encoding") == ENCODING for p in payloads):
        raise ValueError("this history is still encrypted: read it through decoded_history first")
    values = converter.payload_converter.from_payloads(payloads, [type_hint])
    return values[0] if values else None


_INPUT_TYPES: dict[str, type] = {"decide_next_step": DecideInput}
_RESULT_TYPES: dict[str, type] = {"decide_next_step": AgentStep, "issue_refund": RefundResult}


def _activities(events: list[HistoryEvent], converter: DataConverter) -> list[_Activity]:
    by_id: dict[int, _Activity] = {}
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            name = attrs.activity_type.name
            decoded = None
            if name in _INPUT_TYPES:
                decoded = _decode(converter, attrs.input.payloads, _INPUT_TYPES[name])
            by_id[event.event_id] = _Activity(name=name, input=decoded)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            activity = by_id[attrs.scheduled_event_id]
            activity.completed = True
            if activity.name in _RESULT_TYPES:
                activity.result = _decode(
                    converter, attrs.result.payloads, _RESULT_TYPES[activity.name]
                )
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            attrs = event.activity_task_failed_event_attributes
            by_id[attrs.scheduled_event_id].failed = attrs.failure.message
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            attrs = event.activity_task_timed_out_event_attributes
            by_id[attrs.scheduled_event_id].failed = attrs.failure.message or "timed out"
    return list(by_id.values())


def survivors_from_history(
    history: WorkflowHistory,
    converter: DataConverter = pydantic_data_converter,
    refund_attempts_in_flight: int = 0,
) -> Survivors:
    """Read a decoded history (decoded_history, or one written before the codec was on)."""
    events = list(history.events)
    activities = _activities(events, converter)
    decides = [a for a in activities if a.name == "decide_next_step"]
    refunds = [a for a in activities if a.name == "issue_refund"]

    memory = decides[-1].input.memory if decides and decides[-1].input else []
    answers = {o.question_id: o.text for o in memory if isinstance(o, Answer)}
    order = next((o.order for o in memory if isinstance(o, OrderLookup)), None)
    lookups = [a.name for a in activities if a.name in LOOKUP_TOOLS and a.completed]

    outcome = None
    closed = False
    customer_signals = 0
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            if event.workflow_execution_signaled_event_attributes.signal_name == "customer_message":
                customer_signals += 1
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            closed = True
            outcome = _decode(
                converter,
                event.workflow_execution_completed_event_attributes.result.payloads,
                ConversationOutcome,
            )
        elif event.event_type in (
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
        ):
            closed = True

    refund = RefundProgress(state="not started")
    if refunds:
        last = refunds[-1]
        if last.completed:
            refund = RefundProgress(
                state=last.result.status if last.result else "succeeded",
                attempts=last.result.attempt if last.result else 1,
                refund=last.result,
            )
        elif last.failed:
            refund = RefundProgress(state="failed", last_failure=last.failed)
        else:
            refund = RefundProgress(state="in flight", attempts=refund_attempts_in_flight)

    return Survivors(
        workflow_id=history.workflow_id,
        closed=closed,
        answers=answers,
        lookups=lookups,
        next_action=_next_action(closed, outcome, decides, activities, refund),
        refund=refund,
        decide_calls=len(decides),
        customer_signals=customer_signals,
        order=order,
        outcome=outcome,
    )


def _next_action(
    closed: bool,
    outcome: ConversationOutcome | None,
    decides: list[_Activity],
    activities: list[_Activity],
    refund: RefundProgress,
) -> str:
    if closed:
        return f"none: closed ({outcome.status if outcome else 'not completed'})"
    if not decides or not decides[-1].completed:
        return "decide next step"
    step: AgentStep = decides[-1].result
    after = activities[activities.index(decides[-1]) + 1 :]
    if step.action == "ask":
        return f"wait for the customer's answer to: {step.question}"
    if step.action == "lookup":
        done = any(a.name == step.tool and a.completed for a in after)
        return "decide next step" if done else f"run {step.tool}"
    if step.outcome == "deny":
        return "tell the customer the refund is denied"
    if refund.state == "in flight":
        return "issue refund (in flight)"
    if step.outcome == "escalate" and not any(a.name == "authorize_refund" for a in after):
        return "wait for a support agent's approval"
    return "issue refund"


async def what_survives(client: Client, workflow_id: str) -> Survivors:
    """Read a conversation's position from Temporal now; needs no Worker."""
    handle = client.get_workflow_handle(workflow_id)
    history = await decoded_history(await handle.fetch_history(), client.data_converter)
    description = await handle.describe()
    attempts = max(
        (
            p.attempt
            for p in description.raw_description.pending_activities
            if p.activity_type.name == "issue_refund"
        ),
        default=0,
    )
    return survivors_from_history(history, client.data_converter, attempts)

"""What survives: a conversation's position rebuilt from Event History alone.

    input (WorkflowExecutionStarted) + Signals and accepted Updates + steps (Activities,
        local-activity markers)
        -> answers, lookups, the order, next action, where the refund stands

Event History lives in the Temporal Service, not in a Worker, so this works while no Worker is
alive (a Query would not). A step is a regular Activity (its scheduled and closing events) or a
local activity (one marker holding its result). The answers are the customer's recorded messages
(customer_message Signals, and customer_message_update Updates in their UpdateAccepted events),
taken by the rule the Workflow applies (agent/intake.py) and paired in order with the decide steps
that asked. The history is encrypted: `what_survives` decodes it through the client's converter
(agent/decoded_history.py) first, and a missing key fails there, naming the key id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import groupby
from typing import Any, get_args

from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter

from agent.codec import ENCODING
from agent.decoded_history import decoded_history
from agent.intake import MESSAGE_SIGNAL, MESSAGE_UPDATE, answer_text, from_customer, remember
from agent.models import (
    AgentStep,
    Approval,
    ConversationOutcome,
    ConversationStart,
    CustomerMessage,
    Disposition,
    OrderDetails,
    OrderLookup,
    OutboundMessage,
    PostedMessage,
    QuestionId,
    RefundResult,
    Takeover,
    ThreadRef,
)

LOOKUP_TOOLS = ("lookup_order", "lookup_customer_history", "check_refund_policy")
# What the SDK's core names a local activity's marker. It writes two details in it: "data" (its
# own JSON: the activity type, attempt, times; never through the codec) and "result" (the
# activity's result, a payload like any other: encrypted).
LOCAL_ACTIVITY_MARKER = "core_local_activity"
_QUESTIONS = frozenset(get_args(QuestionId))


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
    # The refund rules' answer to the decider's proposal (None until they have given it).
    decision: Disposition | None = None
    # The live model's own summary of its proposal: for support agents and operators only, never
    # for a customer (None with the offline policy).
    model_note: str | None = None
    thread: ThreadRef | None = None  # where the conversation lives
    # The soonest timer the conversation waits on and what it is for ("remind the customer at …").
    next_deadline: str | None = None
    # Who has taken the conversation over (/refund-takeover), and since when; None: the agent.
    taken_over: str | None = None
    # A step waiting out a dependency's outage: which, since when, its attempts and last failure.
    waiting_on: str | None = None


@dataclass
class Step:
    """One step of the conversation: a regular Activity, or a local activity's marker."""

    name: str
    at: int  # the event id that scheduled it (an Activity) or recorded it (a local activity)
    local: bool = False
    input: Any = None  # read for post_to_thread only (a regular Activity's)
    result: Any = None  # read for the steps in _RESULT_TYPES only
    completed: bool = False
    failed: str | None = None


@dataclass(frozen=True)
class Click:
    """An Approve or Deny click the Workflow took (not a redelivered one)."""

    at: int  # its Signal's event id
    round: int | None
    decision: str


@dataclass
class _Signals:
    """The Signals as the Workflow took them."""

    answers: list[str] = field(default_factory=list)  # accepted texts, in order
    clicks: list[Click] = field(default_factory=list)
    customer_messages: int = 0  # every customer message delivered (Signal or Update), taken or not
    start: ConversationStart | None = None  # the Workflow's input
    taken_over: str | None = None  # who holds it now and since when, from takeover Signals


_INPUT_TYPES: dict[str, type] = {"post_to_thread": OutboundMessage}
_RESULT_TYPES: dict[str, type] = {
    "post_to_thread": PostedMessage,
    "decide_next_step": AgentStep,
    "lookup_order": OrderLookup,
    "apply_refund_rules": Disposition,
    "issue_refund": RefundResult,
}


def _decode(converter: DataConverter, payloads: Any, type_hint: type) -> Any:
    payloads = list(payloads)
    if any(p.metadata.get("encoding") == ENCODING for p in payloads):
        raise ValueError("this history is still encrypted: read it through decoded_history first")
    values = converter.payload_converter.from_payloads(payloads, [type_hint])
    return values[0] if values else None


def _read(converter: DataConverter, types: dict[str, type], name: str, payloads: Any) -> Any:
    return _decode(converter, payloads, types[name]) if name in types else None


def local_activity(event: HistoryEvent) -> dict[str, Any] | None:
    """A local activity marker's own data (activity_type, attempt, ...); None for other events.
    Plain JSON written by the SDK's core, so it reads in encrypted history too."""
    if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
        return None
    marker = event.marker_recorded_event_attributes
    if marker.marker_name != LOCAL_ACTIVITY_MARKER:
        return None  # a workflow.patched marker
    data: dict[str, Any] = json.loads(marker.details["data"].payloads[0].data)
    return data


def _in_scheduling_order(events: Sequence[HistoryEvent]) -> list[HistoryEvent]:
    """The events, with each run of local-activity markers in the order the Workflow scheduled
    them: markers are recorded as the steps finish, and steps started together (the order and
    the history lookups) may finish in either order."""
    ordered: list[HistoryEvent] = []
    read = [(local_activity(event), event) for event in events]
    for is_marker, group in groupby(read, key=lambda pair: pair[0] is not None):
        run = list(group)
        if is_marker:
            run.sort(key=lambda pair: (pair[0] or {})["seq"])
        ordered += [event for _meta, event in run]
    return ordered


def step_names(events: Sequence[HistoryEvent]) -> list[str]:
    """The name of every step, Activity or local activity, in the order the Workflow scheduled
    them (encrypted history will do)."""
    names = []
    for event in _in_scheduling_order(events):
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names.append(event.activity_task_scheduled_event_attributes.activity_type.name)
        elif (meta := local_activity(event)) is not None:
            names.append(meta["activity_type"])
    return names


def steps_of(events: Sequence[HistoryEvent], converter: DataConverter) -> list[Step]:
    """Every Activity and local activity of a decoded history, in the order they were scheduled."""
    by_id: dict[int, Step] = {}
    for event in _in_scheduling_order(events):
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            name = scheduled.activity_type.name
            given = _read(converter, _INPUT_TYPES, name, scheduled.input.payloads)
            by_id[event.event_id] = Step(name, event.event_id, input=given)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed = event.activity_task_completed_event_attributes
            step = by_id[completed.scheduled_event_id]
            step.completed = True
            step.result = _read(converter, _RESULT_TYPES, step.name, completed.result.payloads)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            failed = event.activity_task_failed_event_attributes
            by_id[failed.scheduled_event_id].failed = failed.failure.message
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            timed_out = event.activity_task_timed_out_event_attributes
            by_id[timed_out.scheduled_event_id].failed = timed_out.failure.message or "timed out"
        elif (meta := local_activity(event)) is not None:
            marker = event.marker_recorded_event_attributes
            step = Step(meta["activity_type"], event.event_id, local=True)
            if marker.HasField("failure"):
                step.failed = marker.failure.message or "failed"
            else:
                step.completed = True
                step.result = _read(
                    converter, _RESULT_TYPES, step.name, marker.details["result"].payloads
                )
            by_id[event.event_id] = step
    return list(by_id.values())


def _signals(events: list[HistoryEvent], converter: DataConverter) -> _Signals:
    found = _Signals()
    start: ConversationStart | None = None
    seen: list[str] = []
    held: list[str] | None = None  # while taken over: the customer's messages wait here
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = event.workflow_execution_started_event_attributes
            start = found.start = _decode(converter, started.input.payloads, ConversationStart)
            seen = [start.opening_message_id] if start else []
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signaled = event.workflow_execution_signaled_event_attributes
            if signaled.signal_name == "approval":
                click = _decode(converter, signaled.input.payloads, Approval)
                if remember(seen, f"click:{click.click_id}"):  # clicks share the window of ids
                    found.clicks.append(Click(event.event_id, click.round, click.decision))
            elif signaled.signal_name == "takeover":
                change = _decode(converter, signaled.input.payloads, Takeover)
                since = event.event_time.ToDatetime().strftime("%Y-%m-%d %H:%M UTC")
                if change.taken and held is None:
                    held, found.taken_over = [], f"{change.actor.label} since {since}"
                elif not change.taken and held is not None:
                    # Handed back: what was written meanwhile is taken then, in order.
                    found.answers += held
                    held, found.taken_over = None, None
        if (message := customer_message(event, converter)) is not None:
            found.customer_messages += 1
            if start is None or not remember(seen, message.message_id):
                continue
            if from_customer(message, start.customer) and (text := answer_text(message)):
                # The Workflow's inbox bound (MAX_QUEUED_MESSAGES, 20) never drops one of the
                # first 20 taken, and a run asks at most MAX_TURNS (10) questions.
                (found.answers if held is None else held).append(text)
    return found


def customer_message(event: HistoryEvent, converter: DataConverter) -> CustomerMessage | None:
    """The customer's message an event delivered: a customer_message Signal, or an accepted
    customer_message_update Update (its input is in the UpdateAccepted event, written in the
    workflow task that took it, so history's order is the order the Workflow took them in).
    None for any other event."""
    if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
        signaled = event.workflow_execution_signaled_event_attributes
        if signaled.signal_name == MESSAGE_SIGNAL:
            return _decode(converter, signaled.input.payloads, CustomerMessage)
    elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
        request = event.workflow_execution_update_accepted_event_attributes.accepted_request
        if request.input.name == MESSAGE_UPDATE:
            return _decode(converter, request.input.args.payloads, CustomerMessage)
    return None


def _outcome(events: list[HistoryEvent], converter: DataConverter) -> tuple[bool, Any]:
    """(closed, the Workflow's result if it completed)."""
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            attrs = event.workflow_execution_completed_event_attributes
            return True, _decode(converter, attrs.result.payloads, ConversationOutcome)
        if event.event_type in (
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
        ):
            return True, None
    return False, None


def _refund(refunds: list[Step], attempts_in_flight: int) -> RefundProgress:
    if not refunds:
        return RefundProgress(state="not started")
    last = refunds[-1]
    if last.completed:
        return RefundProgress(
            state=last.result.status if last.result else "succeeded",
            attempts=last.result.attempt if last.result else 1,
            refund=last.result,
        )
    if last.failed:
        return RefundProgress(state="failed", last_failure=last.failed)
    return RefundProgress(state="in flight", attempts=attempts_in_flight)


def survivors_from_history(
    history: WorkflowHistory,
    converter: DataConverter = pydantic_data_converter,
    refund_attempts_in_flight: int = 0,
) -> Survivors:
    """Read a decoded history (decoded_history, or one written before the codec was on)."""
    events = list(history.events)
    steps = steps_of(events, converter)
    signals = _signals(events, converter)
    decides = [s for s in steps if s.name == "decide_next_step"]
    asks = [
        s.result
        for s in decides
        if s.completed and s.result.action == "ask" and s.result.question_id in _QUESTIONS
    ]
    # Each question takes the next message the Workflow accepted, in order (its inbox).
    answers = {ask.question_id: text for ask, text in zip(asks, signals.answers, strict=False)}
    found = next((s.result for s in steps if s.name == "lookup_order" and s.completed), None)
    closed, outcome = _outcome(events, converter)
    refund = _refund([s for s in steps if s.name == "issue_refund"], refund_attempts_in_flight)
    decision = _latest_result(steps, "apply_refund_rules")
    proposal: AgentStep | None = _latest_result(steps, "decide_next_step")
    model_note = None
    if proposal is not None and proposal.action == "decide" and proposal.source != "policy":
        model_note = proposal.rationale
    return Survivors(
        workflow_id=history.workflow_id,
        closed=closed,
        answers=answers,
        lookups=[s.name for s in steps if s.name in LOOKUP_TOOLS and s.completed],
        next_action=_next_action(closed, outcome, steps, signals, len(asks), refund),
        refund=refund,
        decide_calls=len(decides),
        customer_signals=signals.customer_messages,
        order=found.order if found else None,
        outcome=outcome,
        decision=decision,
        model_note=model_note,
        thread=signals.start.thread if signals.start else None,
        next_deadline=None if closed else _next_deadline(events, converter),
        taken_over=None if closed else signals.taken_over,
    )


def _next_deadline(events: list[HistoryEvent], converter: DataConverter) -> str | None:
    """The soonest running timer: when it fires and what for (its summary, never customer text)."""
    running: dict[int, tuple[datetime, str]] = {}
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            attrs = event.timer_started_event_attributes
            fires = (
                event.event_time.ToDatetime(tzinfo=UTC) + attrs.start_to_fire_timeout.ToTimedelta()
            )
            summary = "a timer"
            if event.user_metadata.HasField("summary"):
                summary = _decode(converter, [event.user_metadata.summary], str) or summary
            running[event.event_id] = (fires, summary)
        elif event.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
            running.pop(event.timer_fired_event_attributes.started_event_id, None)
        elif event.event_type == EventType.EVENT_TYPE_TIMER_CANCELED:
            running.pop(event.timer_canceled_event_attributes.started_event_id, None)
    if not running:
        return None
    fires, summary = min(running.values())
    return f"{summary} at {fires:%Y-%m-%d %H:%M:%S} UTC"


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
        failure = (
            activity.last_failure.message.splitlines()[0] if activity.last_failure.message else ""
        )
        return (
            f"{DEPENDENCIES.get(name, name)} ({name}) since {since}, attempt {activity.attempt}"
            + (f": {failure[:160]}" if failure else "")
        )
    return None


def _latest_result(steps: list[Step], name: str) -> Any:
    return next((s.result for s in reversed(steps) if s.name == name and s.completed), None)


def posted_message(step: Step) -> OutboundMessage | None:
    """What a step posted: a post_to_thread's input (a regular Activity) or the message its result
    echoes (a post made inside the workflow task, whose input Event History does not keep), or
    the question a decide step posted itself; None for another step, or a try that failed."""
    if step.name == "decide_next_step":
        posted = step.result.posted if step.completed and step.result is not None else None
        return posted.message if posted is not None else None
    if step.name != "post_to_thread":
        return None
    if step.input is not None:
        return step.input
    return step.result.message if step.result is not None else None


def _is_escalation(step: Step) -> bool:
    posted = posted_message(step)
    return posted is not None and posted.kind == "escalation"


def _answering_click(steps: list[Step], clicks: list[Click]) -> Click | None:
    """The click that answers the latest escalation's buttons, if one has arrived."""
    escalations = [s for s in steps if _is_escalation(s)]
    if not escalations:
        return None
    latest, round_number = escalations[-1], len(escalations)  # rounds count from 1
    # A click made on an earlier round's buttons is dropped by the Workflow; one from buttons
    # posted before rounds existed (round None) answers the round open when it arrives.
    return next((c for c in clicks if c.at > latest.at and c.round in (None, round_number)), None)


def _next_action(
    closed: bool,
    outcome: ConversationOutcome | None,
    steps: list[Step],
    signals: _Signals,
    questions: int,
    refund: RefundProgress,
) -> str:
    if closed:
        return f"none: closed ({outcome.status if outcome else 'not completed'})"
    if signals.taken_over:
        return f"wait for {signals.taken_over.split(' since ')[0]} to hand the conversation back"
    at = max((i for i, s in enumerate(steps) if s.name == "decide_next_step"), default=None)
    if at is None or not steps[at].completed:
        return "decide next step"
    step: AgentStep = steps[at].result
    after = steps[at + 1 :]
    if step.action == "ask":
        if len(signals.answers) >= questions:  # answered in history, maybe not taken in yet
            return "decide next step"
        return f"wait for the customer's answer to: {step.question}"
    if step.action == "lookup":
        done = any(a.name == step.tool and a.completed for a in after)
        return "decide next step" if done else f"run {step.tool}"
    # The decider's step is a proposal: what happens is what the rules made of it.
    rules = next((s for s in after if s.name == "apply_refund_rules"), None)
    if rules is None or not rules.completed:
        return "check the decision against the refund rules"
    after = [s for s in after if s.at > rules.at]
    step = step.model_copy(update={"outcome": rules.result.outcome})
    if step.outcome == "deny":
        return "tell the customer the refund is denied"
    if refund.state == "in flight":
        return "issue refund (in flight)"
    escalations = any(_is_escalation(s) for s in after)
    if not escalations and step.outcome != "escalate":
        return "issue refund"
    click = _answering_click(after, signals.clicks)
    if click is None:
        return "wait for a support agent's approval"
    if click.decision == "deny":
        # It counts only if the clicker may decide refunds (read live): then the run closes.
        return "check the Deny click's grant, then tell the customer the refund is denied"
    return "issue refund"


# A workflow task in flight may already have posted in the thread (a post is made inside the task
# that decided it), but Event History records the task's steps only when it completes. A reader
# waits that long for it, so the position it reads agrees with the thread; a task held by a dead
# Worker is not waited out.
TASK_IN_FLIGHT_WAIT_S = 2.0


async def what_survives(client: Client, workflow_id: str) -> Survivors:
    """Read a conversation's position from Temporal now; needs no Worker."""
    handle = client.get_workflow_handle(workflow_id)
    raw = await handle.fetch_history()
    if raw.events and raw.events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                _event_after(handle, raw.events[-1].event_id), TASK_IN_FLIGHT_WAIT_S
            )
        raw = await handle.fetch_history()
    history = await decoded_history(raw, client.data_converter)
    description = await handle.describe()
    pending = list(description.raw_description.pending_activities)
    attempts = max(
        (p.attempt for p in pending if p.activity_type.name == "issue_refund"), default=0
    )
    survivors = survivors_from_history(history, client.data_converter, attempts)
    return survivors.model_copy(update={"waiting_on": _waiting_on(pending)})


async def _event_after(handle: WorkflowHandle, event_id: int) -> None:
    async for event in handle.fetch_history_events(wait_new_event=True):
        if event.event_id > event_id:
            return

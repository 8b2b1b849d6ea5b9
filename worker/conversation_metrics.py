"""What the Worker measures of each conversation, outside the Workflow's code: turns and endings.

    customer_message | approval Signal, customer_message_update Update
        -> a turn starts (the workflow task's time)
        -> the next post_to_thread, or a decide step that may post its question, carries that
           time in a header -> the post made -> refund_bot_turn_duration_seconds
    the run returns its outcome, or fails -> refund_bot_conversations_ended_total{outcome}

A turn is what a customer waits for: from the workflow task that took their message to the
agent's next post. Both are the SDK's replay-safe meters, and headers add no command.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import temporalio.activity
import temporalio.exceptions
import temporalio.workflow
from temporalio.converter import PayloadConverter
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    HandleSignalInput,
    HandleUpdateInput,
    Interceptor,
    StartActivityInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from agent.intake import MESSAGE_SIGNAL, MESSAGE_UPDATE
from agent.models import AgentStep, OutboundMessage
from agent.workflow import WORKFLOW_TYPE

TURN_HEADER = "refund-bot-turn"
# The Signals a customer (or a support agent) waits on an answer to, and the Activity that answers.
TURN_SIGNALS = frozenset({MESSAGE_SIGNAL, "approval"})
# The customer's message as an Update (the router's first choice): a turn like the Signal's, and
# counted under the Signal's label, so a dashboard reads one series whichever carried the message.
TURN_UPDATES = {MESSAGE_UPDATE: MESSAGE_SIGNAL}
POST = "post_to_thread"
# The offline policy's step, which posts the question it asks (DecideInput.post_question).
DECIDE = "decide_next_step"

TURN_METRIC = "refund_bot_turn_duration_seconds"
TURN_DESCRIPTION = (
    "From the workflow task that took a customer's message (signal=customer_message) or a click "
    "(signal=approval) to the agent's next post made"
)
# Buckets for a turn: about 10 ms on the embedded server, seconds with a live model or a slow
# platform (the SDK's defaults start at 50 ms). worker/telemetry.py gives them to the exporter.
TURN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ENDED_METRIC = "refund_bot_conversations_ended"
# ConversationOutcome's statuses, and `error` for a run that failed.
ENDED_OUTCOMES = ("refunded", "denied", "declined", "expired", "failed", "error")
ENDED_DESCRIPTION = (
    "Conversations that ended, by outcome: refunded, denied, declined, expired, failed (the "
    "refund could not be made), error (a step failed for good; the run failed)"
)

_CONVERTER = PayloadConverter.default


class ConversationMetrics(Interceptor):
    """Given to the Worker (worker/runner.py): turns and endings of every conversation it runs."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _TurnEnd(next)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _Conversation


@dataclass
class _Turn:
    started_ns: int
    signal: str
    seq: int | None = None  # the message key's sequence number of the post that answers it


class _Conversation(WorkflowInboundInterceptor):
    def __init__(self, next: WorkflowInboundInterceptor) -> None:
        super().__init__(next)
        self.turn: _Turn | None = None

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_StampAnswers(outbound, self))

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        if temporalio.workflow.info().workflow_type != WORKFLOW_TYPE:
            # Only the conversations count, not any other Workflow a Worker runs.
            return await super().execute_workflow(input)
        try:
            outcome = await super().execute_workflow(input)
        except temporalio.exceptions.FailureError:
            # Only these end the run (failed); anything else fails the task, which is retried.
            _ended("error")
            raise
        _ended(str(getattr(outcome, "status", "unknown")))
        return outcome

    async def handle_signal(self, input: HandleSignalInput) -> None:
        # The first Signal since the last answer starts the turn: a second message written
        # before the agent answered waits as long as the first, no longer.
        if input.signal in TURN_SIGNALS and (self.turn is None or self.turn.seq is not None):
            self.turn = _Turn(temporalio.workflow.time_ns(), input.signal)
        await super().handle_signal(input)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        if input.update in TURN_UPDATES and (self.turn is None or self.turn.seq is not None):
            self.turn = _Turn(temporalio.workflow.time_ns(), TURN_UPDATES[input.update])
        return await super().handle_update_handler(input)


def _ended(outcome: str) -> None:
    temporalio.workflow.metric_meter().create_counter(ENDED_METRIC, ENDED_DESCRIPTION).add(
        1, {"outcome": outcome}
    )


# Either kind of Activity start: a post or a decide step runs as a local activity first.
_Start = TypeVar("_Start", StartActivityInput, StartLocalActivityInput)


class _StampAnswers(WorkflowOutboundInterceptor):
    """The turn's start, in the header of the step that answers it."""

    def __init__(self, next: WorkflowOutboundInterceptor, conversation: _Conversation) -> None:
        super().__init__(next)
        self._conversation = conversation

    def start_activity(self, input: StartActivityInput) -> temporalio.workflow.ActivityHandle:
        return self._start(input, super().start_activity)

    def start_local_activity(
        self, input: StartLocalActivityInput
    ) -> temporalio.workflow.ActivityHandle:
        return self._start(input, super().start_local_activity)

    def _start(
        self, input: _Start, start: Callable[[_Start], temporalio.workflow.ActivityHandle]
    ) -> temporalio.workflow.ActivityHandle:
        turn = self._conversation.turn
        if turn is None or not input.args:
            return start(input)
        if input.activity == POST:
            seq = getattr(getattr(input.args[0], "key", None), "seq", None)
            if turn.seq is None:
                turn.seq = seq  # the turn's first post answers it
            if turn.seq == seq:  # that post, or its retry as the regular Activity (same key)
                _stamp(input, turn)
        elif (
            input.activity == DECIDE
            and turn.seq is None
            and getattr(input.args[0], "post_question", None) is not None
        ):
            # A decide step answers the turn if it posts its question: asked of it here, known
            # only from its result (_watched).
            _stamp(input, turn)
            return _watched(start(input), turn)
        return start(input)


def _stamp(input: StartActivityInput | StartLocalActivityInput, turn: _Turn) -> None:
    stamp = {"started_ns": turn.started_ns, "signal": turn.signal}
    input.headers = {**input.headers, TURN_HEADER: _CONVERTER.to_payloads([stamp])[0]}


def _watched(
    handle: temporalio.workflow.ActivityHandle, turn: _Turn
) -> temporalio.workflow.ActivityHandle:
    """A decide step's handle: the turn is answered once its result says it posted (replayed
    from the same result, so the Workflow's state stays deterministic)."""

    def answered(done: Any) -> None:
        if done.cancelled() or done.exception() is not None:
            return
        question = _question_posted(done.result())
        if question is not None:
            turn.seq = question.key.seq

    handle.add_done_callback(answered)
    return handle


def _question_posted(result: Any) -> OutboundMessage | None:
    """The question a decide step's result says it posted, if it is one and did."""
    if isinstance(result, AgentStep) and result.posted is not None:
        return result.posted.message
    return None


class _TurnEnd(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        header = input.headers.get(TURN_HEADER)
        result = await super().execute_activity(input)
        # A post answers the turn; a decide step only when it posted its question.
        if header is not None and (
            not isinstance(result, AgentStep) or _question_posted(result) is not None
        ):
            stamp = _CONVERTER.from_payloads([header])[0]
            took = max(0, time.time_ns() - int(stamp["started_ns"]))
            temporalio.activity.metric_meter().create_histogram_timedelta(
                TURN_METRIC, TURN_DESCRIPTION
            ).record(timedelta(microseconds=took // 1000), {"signal": str(stamp["signal"])})
        return result

"""Traces through Temporal: temporalio.contrib.opentelemetry's interceptor, a trace per Signal.

    bot:    SignalWithStartWorkflow | SignalWorkflow:<signal> (client spans) -> the Signal's header
    Worker: HandleSignal:<signal> -> the steps the Workflow then starts, under that Signal's span

The SDK puts every span a Workflow makes under its start's context: one trace per conversation,
days long. refund-bot's unit is a customer's message, so the Workflow's current span is a `_Turn`:
the span of the Signal it last received. Spans are made only outside replay and add no command.
Imported only when tracing is on: the SDK's OpenTelemetry package takes 0.2 s to import.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import opentelemetry.context
import opentelemetry.trace
import temporalio.exceptions
import temporalio.worker
import temporalio.workflow
from opentelemetry.trace import INVALID_SPAN_CONTEXT, NonRecordingSpan, SpanKind
from temporalio.contrib.opentelemetry import TracingInterceptor, TracingWorkflowInboundInterceptor
from temporalio.contrib.opentelemetry._context import attached_context


class ConversationTracing(TracingInterceptor):
    """The SDK's tracing interceptor for clients, Activities and Workflows, whose Workflow side
    follows each Signal's trace. Given to Client.connect: the client's calls and the Workers
    built on it get it (agent.temporal_client)."""

    def workflow_interceptor_class(
        self, input: temporalio.worker.WorkflowInterceptorClassInput
    ) -> type[TracingWorkflowInboundInterceptor]:
        super().workflow_interceptor_class(input)  # registers the SDK's span-making function
        return _TurnTracing


class _Turn(NonRecordingSpan):
    """The current span of a conversation's Workflow code: one object, put in its context once,
    whose span context moves to each Signal's as it arrives."""

    def __init__(self) -> None:
        super().__init__(INVALID_SPAN_CONTEXT)

    def follow(self, context: opentelemetry.context.Context) -> None:
        span_context = opentelemetry.trace.get_current_span(context).get_span_context()
        if span_context.is_valid:
            self._context = span_context


class _TurnTracing(TracingWorkflowInboundInterceptor):
    """The SDK's interceptor, subclassed as its documentation invites, with the Workflow's
    context chosen in `_top_level_workflow_context`: tests/test_tracing.py checks one
    conversation's tree, so an SDK release that moves that method fails there."""

    def __init__(self, next: temporalio.worker.WorkflowInboundInterceptor) -> None:
        super().__init__(next)
        self._turn = _Turn()

    def _follow(self, headers: Any) -> None:
        header = headers.get(self.header_key)
        carrier = self.payload_converter.from_payloads([header])[0] if header else None
        if carrier:
            self._turn.follow(self.text_map_propagator.extract(carrier))

    async def handle_signal(self, input: temporalio.worker.HandleSignalInput) -> None:
        # Before the SDK's HandleSignal span, so that span and every step after it are this
        # Signal's (a Signal without a header, sent untraced, leaves the turn where it was).
        self._follow(input.headers)
        await super().handle_signal(input)

    @contextmanager
    def _top_level_workflow_context(self, *, success_is_complete: bool) -> Iterator[None]:
        # The SDK's, but the context holds the turn instead of the start's span: the run and
        # each handler attach it once, and every span made under it follows the turn.
        if not self._turn.get_span_context().is_valid:
            self._follow(temporalio.workflow.info().headers)
        context = opentelemetry.trace.set_span_in_context(
            self._turn, self._set_on_context(opentelemetry.context.Context())
        )
        success = False
        exception: Exception | None = None
        with attached_context(context):
            try:
                yield None
                success = True
            except temporalio.exceptions.FailureError as err:
                # Only these end the Workflow (failed); the rest fail the task, retried.
                exception = err
                raise
            finally:
                if exception or (success and success_is_complete):
                    self._completed_span(
                        f"CompleteWorkflow:{temporalio.workflow.info().workflow_type}",
                        exception=exception,
                        kind=SpanKind.INTERNAL,
                    )

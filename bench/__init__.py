"""Benchmarks: each module's docstring gives its command; results go in docs/benchmarks.md."""

from __future__ import annotations

import asyncio
import math
import statistics
import sys
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterable, Sequence
from datetime import datetime
from typing import Any, NoReturn

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from agent.codec import CodecKeyError
from agent.models import Actor, ThreadRef
from bot.conversations import InboundMessage
from worker.exit import exit_now


def run_benchmark(main: Coroutine[Any, Any, None]) -> NoReturn:
    """Run `main` to the end; a codec key problem stops it in one line naming the key id."""
    try:
        asyncio.run(main)
    except CodecKeyError as err:
        print(f"benchmark stopped: {err}", file=sys.stderr)
        exit_now(1)
    exit_now(0)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least q% of the values at or below."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def print_steps(heading: str, steps: list[tuple[str, list[float]]]) -> None:
    """A crowd's breakdown: one row a step, its p50, p90 and max over the crowd, in seconds."""
    width = max(len(heading), *(len(name) for name, _ in steps))
    print(f"  {heading:<{width}}       p50       p90       max", flush=True)
    for name, values in steps:
        p90 = statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]
        print(
            f"  {name:<{width}} {statistics.median(values):8.3f}s {p90:8.3f}s {max(values):8.3f}s",
            flush=True,
        )


async def history_as_written(handle: WorkflowHandle) -> AsyncIterator[HistoryEvent]:
    """The run's events in order as the server writes them (long-polled), each once. Temporal
    sometimes refuses a long poll's next page as stale ("Current and request branch tokens, or
    current and request versioned transitions, don't match": the run's state moved on under the
    page token); the read then starts again from the first event, skipping those already given."""
    last = 0
    while True:
        try:
            async for event in handle.fetch_history_events(wait_new_event=True):
                if event.event_id > last:
                    last = event.event_id
                    yield event
            return
        except RPCError as err:
            if err.status != RPCStatusCode.INVALID_ARGUMENT or "don't match" not in err.message:
                raise


async def release_and_refund(handle: WorkflowHandle) -> tuple[datetime | None, datetime | None]:
    """(the release Signal, issue_refund scheduled), as the server stamped them: the recovery
    benchmarks' clock, which no client's own delays can skew."""
    released = scheduled = None
    for event in (await handle.fetch_history()).events:
        if (
            event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            and event.workflow_execution_signaled_event_attributes.signal_name == "release"
        ):
            released = event.event_time.ToDatetime()
        elif (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_type.name == "issue_refund"
        ):
            scheduled = event.event_time.ToDatetime()
    return released, scheduled


async def no_hold() -> bool:
    """The router's hold switch, off: a benchmark's refunds are never held for a presenter."""
    return False


def customer_says(
    thread: ThreadRef, author: Actor, text: str, *, opens: bool = False
) -> InboundMessage:
    """A customer's message as an adapter hands it to the router, with ids of its own."""
    event_id = uuid.uuid4().hex
    return InboundMessage(
        event_id=event_id,
        thread=thread,
        message_id=f"m-{event_id}",
        author=author,
        text=text,
        opens_thread=opens,
    )


async def read_failures(client: Client, events: Iterable[HistoryEvent]) -> None:
    """Each failed workflow task's message, in place, as its Worker wrote it: the codec encrypts a
    failure's message (agent/codec.py), so the history itself says only "Encoded failure"."""
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failure = event.workflow_task_failed_event_attributes.failure
            if failure.HasField("encoded_attributes"):
                failure.message = str(await client.data_converter.decode_failure(failure))


def first_line(message: str) -> str:
    """A failure's message as a benchmark prints it: its first line, cut to 100 characters."""
    return (message.splitlines() or [""])[0][:100]

"""Turn latency: a customer's reply to the agent's next question, against a bare round trip.

    this process (the bot's side: Signals out, Event History long-polled in)
      -> the dev server refund-bot embeds
      <- one Worker process (bench.turn_workers): refund-bot's Worker with the payload codec on (as
         deployed), off (plain converter) and a codec that changes nothing; the bare round trip
         (bench.round_trip) with one and with two Activities

A turn is the customer_message Signal to the completion of the post_to_thread Activity that puts
the agent's next question in the thread (or, for a post made inside the workflow task, the marker
that task records once the post has returned), both read from Event History timestamps (the
server's clock). Each conversation gives four: it opens with "I want my money back" (no order
number), then "the green one" and "the big one, sorry" (asked again for the order number), "1234"
(asked whether the package was opened) and "Yes" (asked what was damaged); then it is terminated. A
bare run gives four turns the same way: the `ping` Signal to its last `echo` Activity completing.

One conversation or run of each variant per round, one at a time, the order turning every round,
on one server and one Worker process: every variant sees the same machine. The codec's own cost
(bench.codec_cost, in this process) is printed first, for the difference between the encrypted
and plain turns to be read against. A CDF of every variant's turns goes to --plot.

    .venv/bin/python -m bench.turn_latency [--rounds 125]   (4 turns a round: 500 per variant)
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import statistics
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.converter import DataConverter

from agent.models import AgentStep
from bench import history_as_written, percentile, run_benchmark
from bench.codec_cost import codec_alone
from bench.plot import cdf_figure, default_path
from bench.round_trip import BareRoundTrip
from bench.server import embedded_server
from bench.turn_workers import BARE, CONVERTERS, local_threads, queue, turn_workers
from bot.local.thread_store import LocalThreadStore
from harness.conversation import LocalConversation
from harness.events import local_activity

OPENING = "I want my money back"
ANSWERS = ("the green one", "the big one, sorry", "1234", "Yes")
TURNS = len(ANSWERS)
POST = "post_to_thread"
DECIDE = "decide_next_step"
# No single event may take longer than this to appear: a stuck run fails the benchmark.
EVENT_TIMEOUT = 60.0
SIGNALED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED


class Events:
    """A run's Event History as the server writes it (long-polled), read once, in order."""

    def __init__(self, handle: WorkflowHandle, converter: DataConverter) -> None:
        self._events = history_as_written(handle).__aiter__()
        self._converter = converter  # the client's: a marker's result is encoded by the codec
        self._activity: dict[int, str] = {}  # scheduled event id -> activity type

    async def next(self, wanted: Callable[[HistoryEvent], bool | Awaitable[bool]]) -> HistoryEvent:
        while True:
            event = await asyncio.wait_for(anext(self._events), EVENT_TIMEOUT)
            if event.event_type == SCHEDULED:
                name = event.activity_task_scheduled_event_attributes.activity_type.name
                self._activity[event.event_id] = name
            found = wanted(event)
            if await found if inspect.isawaitable(found) else found:
                return event

    async def said(self, event: HistoryEvent) -> bool:
        """The agent's next message posted: a post_to_thread done, or the decide step that
        posted the question it asked (Workflow 1.1 on)."""
        if self.completed(POST)(event):
            return True
        meta = local_activity(event)
        if meta is None or meta["activity_type"] != DECIDE:
            return False
        result = event.marker_recorded_event_attributes.details.get("result")
        if result is None or not result.payloads:
            return False
        (step,) = await self._converter.decode(result.payloads, [AgentStep])
        return step.posted is not None

    def completed(self, activity: str | None = None) -> Callable[[HistoryEvent], bool]:
        def wanted(event: HistoryEvent) -> bool:
            if (meta := local_activity(event)) is not None:
                # A post made inside the workflow task: its marker is written when that task
                # completes, after the post returned (so the turn is, if anything, overstated).
                return "result" in event.marker_recorded_event_attributes.details and (
                    activity is None or meta["activity_type"] == activity
                )
            if event.event_type != COMPLETED:
                return False
            scheduled = event.activity_task_completed_event_attributes.scheduled_event_id
            return activity is None or self._activity.get(scheduled) == activity

        return wanted


def is_signal(event: HistoryEvent) -> bool:
    return event.event_type == SIGNALED


def _is_task_completed(event: HistoryEvent) -> bool:
    return event.event_type == TASK_COMPLETED


def seconds_between(start: HistoryEvent, end: HistoryEvent) -> float:
    return (end.event_time.ToDatetime() - start.event_time.ToDatetime()).total_seconds()


async def conversation(client: Client, threads: LocalThreadStore, task_queue: str) -> list[float]:
    conv = LocalConversation(client, threads, task_queue)
    handle = await conv.open(OPENING)
    events = Events(handle, client.data_converter)
    await events.next(events.said)  # the first question
    turns = []
    for answer in ANSWERS:
        await conv.reply(answer)
        signaled = await events.next(is_signal)
        turns.append(seconds_between(signaled, await events.next(events.said)))
    await handle.terminate("benchmark done")
    return turns


async def bare(client: Client, task_queue: str, activities: int) -> list[float]:
    handle = await client.start_workflow(
        BareRoundTrip.run, activities, id=f"bare-{uuid.uuid4().hex[:12]}", task_queue=task_queue
    )
    events = Events(handle, client.data_converter)
    # As a conversation's turns begin once its first question is out, a bare run's begin once its
    # first workflow task is done: a ping racing that task measured its start, not a round trip.
    await events.next(_is_task_completed)
    turns = []
    for value in range(TURNS):
        await handle.signal(BareRoundTrip.ping, value)
        signaled = await events.next(is_signal)
        for _ in range(activities):
            done = await events.next(events.completed())
        turns.append(seconds_between(signaled, done))
    await handle.signal(BareRoundTrip.ping, -1)
    return turns


def _row(name: str, seconds: list[float]) -> str:
    ms = [s * 1000 for s in seconds]
    return (
        f"  {name:<22} n={len(ms):<5} p50 {percentile(ms, 50):7.1f}   p95 {percentile(ms, 95):7.1f}"
        f"   p99 {percentile(ms, 99):7.1f}   max {max(ms):7.1f} ms"
    )


async def main(rounds: int, codec_rounds: int, plot: Path) -> None:
    await codec_alone(codec_rounds)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        async with embedded_server(data_dir / "temporal") as server:
            prefix = f"turns-{uuid.uuid4().hex[:6]}"
            async with turn_workers(server.address, data_dir, prefix):
                results = await _interleaved(server.address, data_dir, prefix, rounds)
    print(
        f"A turn: the customer's Signal to the next question's post completing (refund-bot), or "
        f"a Signal to its last Activity completing (bare); Event History timestamps; {rounds} "
        f"rounds of {TURNS} turns, interleaved on one dev server:"
    )
    for name, turns in results.items():
        print(_row(name, turns))
    ours, plain, noop = (results[n] for n in ("encrypted", "plain", "no-op codec"))
    for name in ("bare, 2 activities", "bare, 1 activity"):
        print(
            f"  refund-bot (encrypted) / {name}: p50 "
            f"{percentile(ours, 50) / percentile(results[name], 50):.2f}x, p99 "
            f"{percentile(ours, 99) / percentile(results[name], 99):.2f}x"
        )
    median = statistics.median
    print(
        f"  the codec, medians: encrypted - plain = {(median(ours) - median(plain)) * 1000:+.1f} "
        f"ms, no-op codec - plain = {(median(noop) - median(plain)) * 1000:+.1f} ms a turn"
    )
    curves = {name: [s * 1000 for s in turns] for name, turns in results.items()}
    drawn = cdf_figure(plot, "Turn latency (CDF)", "milliseconds", "share of turns", curves)
    print(f"plot: {drawn}")


async def _interleaved(
    address: str, data_dir: Path, prefix: str, rounds: int
) -> dict[str, list[float]]:
    threads = local_threads(data_dir)
    clients = {
        name: await Client.connect(address, data_converter=c) for name, c in CONVERTERS.items()
    }
    bare_client = clients["plain"]

    def variant(name: str) -> Callable[[], Awaitable[list[float]]]:
        if name.startswith("bare"):
            activities = 2 if "2" in name else 1
            return lambda: bare(bare_client, queue(prefix, BARE), activities)
        return lambda: conversation(clients[name], threads, queue(prefix, name))

    names = [*CONVERTERS, "bare, 2 activities", "bare, 1 activity"]
    runs = {name: variant(name) for name in names}
    for name in names:  # warm-up: first connections, the Workers' first tasks and caches
        await runs[name]()
    results: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            results[name] += await runs[name]()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=125)
    parser.add_argument("--codec-rounds", type=int, default=300)
    parser.add_argument("--plot", type=Path, default=default_path("turn_latency"))
    args = parser.parse_args()
    run_benchmark(main(args.rounds, args.codec_rounds, args.plot))

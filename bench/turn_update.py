"""A turn delivered as a Signal or as an Update, on the embedded server or a default-config one.

    this process: ConversationRouter (its inbox a SQLite file), as `refund-bot bot` runs it
      -> a dev server: --server embedded (refund-bot's dynamic config: the transfer queue read up
         to 1,000 times a second) or --server default (Temporal's: 20 a second, as Temporal Cloud
         and most clusters run)
      <- one Worker process (bench.turn_workers): refund-bot's Worker, payload codec on; the bare
         round trip's Worker

Variants, taking turns on one server and one Worker process:
  refund-bot, Signal   the router with message_updates=False: each reply a customer_message Signal
  refund-bot, Update   the router as it ships: each reply a customer_message_update Update
  bare, Signal / Update   bench.round_trip with no Activity: `ping` or `ping_now`, to the workflow
                       task that took it completing (what Temporal alone costs, either way)
  bare opening, signal-with-start / update-with-start   a new run with its first message, to its
                       first workflow task completing

A refund-bot turn is the router's delivery of the customer's reply (`router.deliver`, as an
adapter calls it right after the platform's ack: the Signal or the Update, then the inbox entry
removed) to the post of the agent's next question having completed, as the server stamped it in
Event History (the same host's clock): bench.turn_latency's turn, started when the bot sends the
message rather than at the Signal's event, because an Update has no event of its own until it is
accepted. The inbox keep before it (the ack's share) is the same for both and not in the turn.
Each conversation gives four turns (bench.turn_latency's answers). "router call" is how long
`deliver` took: with the Update, until the Worker accepted it, which it reports with the workflow
task that runs the agent's next step (UPDATE_ACCEPT_TIMEOUT in bot/conversations.py bounds it).

    .venv/bin/python -m bench.turn_update --server default [--rounds 60] [--plot turn_update.png]

`--plot` draws the turns' CDFs, refund-bot's beside the bare round trip's, each as a Signal and as
an Update.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter

from agent.models import Actor, ThreadRef
from agent.stores.sqlite import SqliteDatabase
from bench import customer_says, history_as_written, no_hold, percentile, run_benchmark
from bench.round_trip import BareRoundTrip
from bench.server import SERVERS, embedded_server
from bench.turn_latency import ANSWERS, OPENING, Events
from bench.turn_workers import BARE, local_threads, queue, turn_workers
from bot.conversations import ConversationRouter, InboundMessage, Kept, Routed
from bot.ids import workflow_id_for
from bot.inbox import Inbox
from bot.local.thread_store import LocalThreadStore
from harness.codec import TEST_CONVERTER

CUSTOMER = Actor(platform="local", user_id="customer", display_name="Nyghtowl")
TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
BARE_PINGS = 4
GOAL_MS = (20.0, 60.0)  # a turn's p50 and p99 on a server with Temporal's default settings
TURNS_DRAWN = ("refund-bot, Update", "refund-bot, Signal", "bare, Update", "bare, Signal")


def _message(thread: ThreadRef, text: str, *, opens: bool = False) -> InboundMessage:
    return customer_says(thread, CUSTOMER, text, opens=opens)


def _since(began: float, event_time: object) -> float:
    return event_time.ToDatetime().timestamp() - began  # type: ignore[attr-defined]


async def conversation(
    client: Client, router: ConversationRouter, threads: LocalThreadStore, calls: list[float]
) -> list[float]:
    root = await threads.open_thread("support", CUSTOMER.user_id, OPENING)
    thread = ThreadRef(
        platform="local", workspace="local", channel="support", thread=root.thread_id
    )
    routed = await router.on_message(_message(thread, OPENING, opens=True))
    assert routed == Routed.STARTED, routed
    handle = client.get_workflow_handle(workflow_id_for(thread))
    events = Events(handle, client.data_converter)
    await events.next(events.said)  # the first question
    turns = []
    for answer in ANSWERS:
        kept = await router.keep(_message(thread, answer))  # what the platform's ack waits for
        assert isinstance(kept, Kept), kept
        began = time.time()
        routed = await router.deliver(kept)
        calls.append(time.time() - began)
        assert routed == Routed.SIGNALLED, routed
        posted = await events.next(events.said)
        turns.append(_since(began, posted.event_time))
    await handle.terminate("benchmark done")
    return turns


async def _task_completed(handle: WorkflowHandle, events: object) -> object:
    while True:
        event = await asyncio.wait_for(anext(events), 60)  # type: ignore[call-overload]
        if event.event_type == TASK_COMPLETED:
            return event


async def bare(client: Client, task_queue: str, update: bool) -> list[float]:
    handle = await client.start_workflow(
        BareRoundTrip.run, 0, id=f"bare-{uuid.uuid4().hex[:12]}", task_queue=task_queue
    )
    events = history_as_written(handle).__aiter__()
    await _task_completed(handle, events)
    turns = []
    for value in range(BARE_PINGS):
        began = time.time()
        if update:
            await handle.execute_update(BareRoundTrip.ping_now, value)
        else:
            await handle.signal(BareRoundTrip.ping, value)
        done = await _task_completed(handle, events)
        turns.append(_since(began, done.event_time))  # type: ignore[attr-defined]
    await handle.signal(BareRoundTrip.ping, -1)
    return turns


async def bare_opening(client: Client, task_queue: str, update: bool) -> list[float]:
    workflow_id = f"bare-open-{uuid.uuid4().hex[:12]}"
    began = time.time()
    if update:
        start = WithStartWorkflowOperation(
            BareRoundTrip.run,
            0,
            id=workflow_id,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        await client.execute_update_with_start_workflow(
            BareRoundTrip.ping_now, 0, start_workflow_operation=start
        )
        handle = await start.workflow_handle()
    else:
        handle = await client.start_workflow(
            BareRoundTrip.run,
            0,
            id=workflow_id,
            task_queue=task_queue,
            start_signal="ping",
            start_signal_args=[0],
        )
    events = history_as_written(handle).__aiter__()
    done = await _task_completed(handle, events)
    await handle.signal(BareRoundTrip.ping, -1)
    return [_since(began, done.event_time)]  # type: ignore[attr-defined]


def _row(name: str, seconds: list[float]) -> str:
    ms = [s * 1000 for s in seconds]
    return (
        f"  {name:<38} n={len(ms):<5} p50 {percentile(ms, 50):7.1f}   p95 {percentile(ms, 95):7.1f}"
        f"   p99 {percentile(ms, 99):7.1f}   max {max(ms):7.1f} ms"
    )


async def main(server_kind: str, rounds: int, plot: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        tuned = server_kind == "embedded"
        async with embedded_server(data_dir / "temporal", tuned=tuned) as server:
            prefix = f"turns-{uuid.uuid4().hex[:6]}"
            async with turn_workers(server.address, data_dir, prefix):
                results = await _interleaved(server.address, data_dir, prefix, rounds)
    print(
        f"Server: {server_kind} dynamic config; {rounds} rounds, interleaved on one dev server. A "
        "refund-bot turn: router.deliver to the next question's post completing (server "
        "timestamp); bare: the call to its workflow task completing:"
    )
    for name, values in results.items():
        print(_row(name, values))
    if plot is not None:
        _plot(plot, server_kind, {n: results[n] for n in TURNS_DRAWN})


def _plot(path: Path, server_kind: str, turns: dict[str, list[float]]) -> None:
    from bench import plot

    p50, p99 = GOAL_MS
    drawn = plot.cdf_figure(
        path,
        f"A turn on the {server_kind} server's settings: as an Update and as a Signal",
        "milliseconds",
        "share of turns",
        {name: [s * 1000 for s in seconds] for name, seconds in turns.items()},
        [(p50, f"goal: p50 {p50:.0f} ms, p99 {p99:.0f} ms"), (p99, None)],
    )
    print(f"plot: {drawn}", flush=True)


async def _interleaved(
    address: str, data_dir: Path, prefix: str, rounds: int
) -> dict[str, list[float]]:
    threads = local_threads(data_dir)
    client = await Client.connect(address, data_converter=TEST_CONVERTER)
    bare_client = await Client.connect(address, data_converter=pydantic_data_converter)
    task_queue = queue(prefix, "encrypted")
    routers = {
        update: ConversationRouter(
            client,
            task_queue,
            Inbox(SqliteDatabase(data_dir / ("update" if update else "signal"))),
            no_hold,
            message_updates=update,
        )
        for update in (False, True)
    }
    calls: dict[bool, list[float]] = {False: [], True: []}
    bare_queue = queue(prefix, BARE)
    variants: dict[str, Callable[[], Awaitable[list[float]]]] = {
        "refund-bot, Signal": lambda: conversation(client, routers[False], threads, calls[False]),
        "refund-bot, Update": lambda: conversation(client, routers[True], threads, calls[True]),
        "bare, Signal": lambda: bare(bare_client, bare_queue, False),
        "bare, Update": lambda: bare(bare_client, bare_queue, True),
        "bare opening, signal-with-start": lambda: bare_opening(bare_client, bare_queue, False),
        "bare opening, update-with-start": lambda: bare_opening(bare_client, bare_queue, True),
    }
    names = list(variants)
    for name in names:  # warm-up: first connections, the Workers' first tasks and caches
        await variants[name]()
    for update in calls:
        calls[update].clear()
    results: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            results[name] += await variants[name]()
    results["router call, Signal"] = calls[False]
    results["router call, Update (until accepted)"] = calls[True]
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=SERVERS, default="default")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    run_benchmark(main(args.server, args.rounds, args.plot))

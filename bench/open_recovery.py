"""Recovery with many open conversations: seconds from a Worker's SIGKILL to replies answered.

    N conversations opened (each asked its first question, sticky to the Worker) -> SIGKILL the
    Worker (unannounced: its supervisor sees a death) -> a reply to one conversation every
    --every s from the kill on -> each reply's answer (the workflow task that posts the next
    question, completed: the server's timestamp)

Rounds on one stack (the server `refund-bot run` embeds, one supervised Worker as shipped, a warm
standby), each opening N conversations of its own; the supervisor resets the dead Worker's
conversations (worker.control.reset_sticky_queues).

A reply that reaches Temporal before the release waits out the sticky schedule-to-start timeout
(WORKER_STICKY_TIMEOUT, worker.settings) on the dead queue; after it, only the new Worker's pickup.

    .venv/bin/python -m bench.open_recovery [--open 2000] [--rounds 2] [--replies 20]
        [--every 0.05] [--plot open_recovery.png]

`--plot` draws each variant's replies, all rounds together: when each was answered, from the kill.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import os
import random
import signal
import statistics
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from temporalio.api.enums.v1 import EventType, TimeoutType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle

from agent.models import Actor, ConversationStart, CustomerMessage, ThreadRef
from agent.settings import AgentSettings
from agent.versions import version_attributes
from agent.workflow import RefundConversation
from bench import first_line, percentile, read_failures, run_benchmark
from bench.proc import Sampler, rss_bytes, wait_idle
from bench.server import free_ports
from bot.local.thread_store import LocalThreadStore
from harness.codec import with_test_keys
from harness.conditions import wait_for
from harness.crowd import Shopper, at_most, place_crowd
from harness.stack import child_env
from refund_bot.app import running_stack
from refund_bot.stack import Stack
from refund_bot.wiring import local_thread_store

OPEN_TIMEOUT = 3600.0
GOAL = 1.0  # any reply answered within a second of the kill


async def open_one(
    client: Client, threads: LocalThreadStore, shopper: Shopper, prefix: str, task_queue: str
) -> WorkflowHandle:
    """One shopper's conversation opened as the router opens one: its thread, then
    signal-with-start with the opening message (the Worker then asks its first question)."""
    customer = shopper.actor
    root = await threads.open_thread("support", customer.user_id, shopper.opening)
    start = ConversationStart(
        thread=ThreadRef(
            platform="local", workspace="local", channel="support", thread=root.thread_id
        ),
        customer=customer,
        opening_message_id=root.message_id,
        opening_text=shopper.opening,
    )
    opening = CustomerMessage(message_id=root.message_id, author=customer, text=root.text)
    CUSTOMERS[f"{prefix}-{root.thread_id}"] = customer
    return await client.start_workflow(
        RefundConversation.run,
        start,
        id=f"{prefix}-{root.thread_id}",
        task_queue=task_queue,
        search_attributes=version_attributes(),
        start_signal="customer_message",
        start_signal_args=[opening],
    )


async def open_conversations(
    stack: Stack, n: int, prefix: str, first_order: int
) -> list[WorkflowHandle]:
    """N conversations opened (Signal-with-start, as the router does), returned once the Worker
    has asked each its first question and gone idle: each is then sticky to it."""
    shoppers = await place_crowd(stack.settings, n, prefix=prefix, first_order=first_order)
    threads = local_thread_store(stack.settings)
    # One at a time: the terminal's thread store is one SQLite file.
    handles = [
        await open_one(stack.client, threads, shopper, prefix, stack.temporal.task_queue)
        for shopper in shoppers
    ]
    supervisor = stack.supervisor
    assert supervisor is not None and supervisor.pid is not None
    sample = random.sample(handles, min(20, n))

    async def asked() -> bool:
        for handle in sample:
            if not await answered_after(handle, 0):
                return False
        for pid in supervisor.pids:
            if not await wait_idle(pid, quiet=1.0, within=5.0):
                return False
        return True

    await wait_for(asked, timeout=OPEN_TIMEOUT, interval=2.0, what="every first question")
    return handles


async def all_asked(handles: list[WorkflowHandle]) -> bool:
    """Every conversation asked its first question (and so is in its Worker's cache); twenty
    histories read at a time."""
    asked = await at_most(20, (functools.partial(answered_after, h, 0) for h in handles))
    return all(asked)


async def answered_after(handle: WorkflowHandle, signals: int) -> float | None:
    """When the workflow task after the conversation's (`signals`+1)-th customer_message Signal
    completed (the server's clock, seconds since the epoch); None if not yet."""
    seen = 0
    for event in (await handle.fetch_history()).events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            seen += 1
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and seen > signals:
            return event.event_time.ToDatetime().timestamp()
    return None


def plot_answers(path: Path, title: str, from_kill: dict[str, list[float]]) -> None:
    """Each variant's replies as a CDF of seconds from the kill to the answer, beside the goal."""
    from bench import plot

    drawn = plot.cdf_figure(
        path,
        title,
        "seconds from the Worker's SIGKILL",
        "share of replies answered",
        from_kill,
        [(GOAL, f"goal: within {GOAL:.0f} s")],
    )
    print(f"plot: {drawn}", flush=True)


async def _round(
    stack: Stack, variant: str, n: int, replies: int, every: float, r: int
) -> list[float]:
    """One round: N opened, the Worker killed, `replies` sent; seconds from the kill to each
    reply's answer."""
    supervisor = stack.supervisor
    assert supervisor is not None
    opened = time.monotonic()
    handles = await open_conversations(stack, n, f"r{r}{variant[0]}", 1_000_000 + next(_ORDERS))
    pid = supervisor.pid
    assert pid is not None
    print(
        f"round {r} ({variant}): {n} conversations open in {time.monotonic() - opened:.0f} s "
        f"(load average {os.getloadavg()[0]:.2f}); Worker RSS {rss_bytes(pid) / 2**20:.0f} MB",
        flush=True,
    )
    targets = random.sample(handles, replies)
    before = supervisor.last_report
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    sent: list[float] = []
    for i, handle in enumerate(targets):
        delay = killed + i * every - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        sent.append(time.time())
        await handle.signal("customer_message", yes_reply(handle))
    await wait_for(lambda: supervisor.last_report is not before, timeout=120, what="restart")
    answered: list[float] = []
    for handle in targets:
        at = await wait_for(functools.partial(answered_after, handle, 1), timeout=120)
        answered.append(at)
    timed_out = await task_retries(stack.client, targets)
    from_kill = [a - killed for a in answered]
    from_signal = [a - s for a, s in zip(answered, sent, strict=True)]
    report = supervisor.last_report
    assert report is not None
    print(
        f"  {variant:<8} N={n}: reply answered, from the kill: p50 "
        f"{statistics.median(from_kill):.3f} s, max {max(from_kill):.3f} s; from its Signal: p50 "
        f"{statistics.median(from_signal):.3f} s, p90 {percentile(from_signal, 90):.3f} s, max "
        f"{max(from_signal):.3f} s; replies sent 0-{(replies - 1) * every:.2f} s after the kill; "
        f"successor polling after {report.seconds_to_ready:.3f} s; "
        f"waited > 5 s: {sum(1 for s in from_signal if s > 5)}; workflow tasks timed out after "
        f"the reply: {timed_out or 'none'}",
        flush=True,
    )
    return from_kill


async def task_retries(client: Client, handles: list[WorkflowHandle]) -> dict[str, int]:
    """The workflow tasks that failed or timed out after each conversation's reply, by kind (see
    `retries_in`), over all `handles`. Twenty histories read at a time."""
    found: collections.Counter[str] = collections.Counter()
    for history in await at_most(20, (h.fetch_history for h in handles)):
        await read_failures(client, history.events)
        found.update(retries_in(history.events))
    return dict(found)


def retries_in(events: Iterable[HistoryEvent]) -> collections.Counter[str]:
    """The workflow tasks that failed (by cause and message) or timed out after a conversation's
    reply, by kind: a timeout is one left on a dead or busy sticky queue (schedule-to-start), or
    one handed to a poll that never completed it (start-to-close: a dead Worker Temporal had not
    yet seen go, or a Worker too busy), named by the Worker that took it."""
    found: collections.Counter[str] = collections.Counter()
    signals = 0
    taken_by = ""
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signals += 1
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            taken_by = event.workflow_task_started_event_attributes.identity
        elif signals > 1 and event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failed = event.workflow_task_failed_event_attributes
            name = WorkflowTaskFailedCause.Name(failed.cause).removeprefix(
                "WORKFLOW_TASK_FAILED_CAUSE_"
            )
            # What the Worker said, so that no failure goes unexplained (its first line, cut).
            said = first_line(failed.failure.message)
            found[f"failed ({name.lower()}: {said})" if said else f"failed ({name.lower()})"] += 1
        elif signals > 1 and event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            kind = TimeoutType.Name(event.workflow_task_timed_out_event_attributes.timeout_type)
            key = kind.removeprefix("TIMEOUT_TYPE_").lower()
            if key == "start_to_close":
                key += f" (taken by {taken_by})"
            found[key] += 1
    return found


# Each round's orders start here: a round's N are numbered on from it.
_ORDERS = iter(range(0, 10**9, 100_000))
# Each conversation's customer, by workflow id: only the thread's customer answers questions.
CUSTOMERS: dict[str, Actor] = {}


def yes_reply(handle: WorkflowHandle) -> CustomerMessage:
    return CustomerMessage(message_id=f"reply-{handle.id}", author=CUSTOMERS[handle.id], text="Yes")


async def main(
    n: int, rounds: int, replies: int, every: float, variants: list[str], plot: Path | None
) -> None:
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        temporal = free_ports("open-recovery")
        settings = with_test_keys(AgentSettings(_env_file=None, data_dir=data_dir))
        async with running_stack(temporal, settings, worker_env=child_env(data_dir)) as stack:
            assert stack.supervisor is not None
            server = stack.server.pid if stack.server else None
            from_kill: dict[str, list[float]] = {v: [] for v in variants}
            async with Sampler([server] if server else []) as sampler:
                for r in range(rounds):
                    for variant in variants if r % 2 == 0 else variants[::-1]:
                        from_kill[variant] += await _round(stack, variant, n, replies, every, r)
            if server:
                print(f"server peak RSS {sampler.usage.peak_rss[server] / 2**20:.0f} MB")
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)
    if plot is not None:
        title = f"{n:,} open conversations, the Worker SIGKILLed: replies (supervised)"
        plot_answers(plot, title, from_kill)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--open", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--replies", type=int, default=20)
    parser.add_argument("--every", type=float, default=0.05)
    parser.add_argument("--variants", nargs="+", default=["reset"])
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    run_benchmark(main(args.open, args.rounds, args.replies, args.every, args.variants, args.plot))

"""Recovery: seconds from a Worker's SIGKILL to the conversation's next step, with a warm standby.

    held conversation -> SIGKILL (/crash-worker | unannounced) + release -> issue_refund scheduled

Drills: a conversation held one step before its refund; the Worker is SIGKILLed, through the
control queue as /crash-worker does or unannounced (`kill -9` of its pid, which the supervisor only
sees as a death), and the hold is released as soon as the supervisor reports the successor polling.
Measured from the kill (this host's clock; for /crash-worker, the request, which comes a little
before the kill) to the issue_refund Activity's scheduled event (the server's timestamp, same host,
same clock). The two kinds alternate on one stack, each starting with the standby ready.

Held crowd: `--held` conversations held before their refunds, the Worker killed unannounced, all
released together: seconds from the release to the last refund scheduled (server timestamps).
With `--workers 2` the crowd is shared by two Workers and the first is killed; the other runs on.
The server is the SDK's dev server with its database in memory, or with `--server embedded` the
one `refund-bot run` starts (its SQLite database in a file); its peak RSS and CPU are read from
/proc over the hold and over the release. `--server-memory` gives it Go's soft memory limit, as
TEMPORAL_SERVER_MEMORY_LIMIT does. `--plot` draws a panel for each part that ran: the drills'
spread, and the held crowd's release step by step (when each conversation's Signal was received,
its task taken by a Worker, its refund scheduled).

    uv run python -m bench.recovery [--drills 20] [--held 200] [--workers 1]
        [--backend sqlite|postgresql] [--server test|embedded] [--server-memory 350MiB]
        [--breakdown] [--plot recovery.png]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.testing import WorkflowEnvironment

from agent.settings import TemporalSettings
from bench import (
    first_line,
    print_steps,
    read_failures,
    release_and_refund,
    run_benchmark,
)
from bench.proc import Sampler
from bench.server import free_ports, go_size
from bench.warnings import print_worker_log
from harness.conditions import wait_for
from harness.conversation import LocalConversation
from harness.crowd import at_most, place_crowd
from harness.dev_server import dev_server_pid, start_dev_server
from harness.owner import refunds_made
from harness.postgres import postgres_database
from harness.stack import supervised_stack
from refund_bot.stack import Stack
from refund_bot.wiring import local_thread_store
from worker.control import request_worker_restart, worker_identity

OPENING: dict[str, str] = {}  # each shopper's opening message, by user id
RELEASE_TIMEOUT = 1800.0  # a crowd not refunded in half an hour is a failed run
GOAL = 60.0  # the held crowd's last refund, seconds after the first release
IN_FLIGHT = 200


async def _held(stack: Stack, conversations: list[LocalConversation]) -> None:
    # The setting up is not measured: a few conversations at a time, so that the terminal's thread
    # store (one SQLite file, no busy wait) is not written by hundreds at once.
    async def one(conv: LocalConversation) -> None:
        await conv.open(OPENING[conv.customer.user_id], hold=True)
        for answer in ("Yes", "Split seam"):
            await conv.next_bot_message(timeout=120)
            await conv.reply(answer)
        await conv.wait_phase("held_before_refund", timeout=120)

    await at_most(20, (functools.partial(one, c) for c in conversations))


async def _standby_ready(stack: Stack) -> None:
    """Until the standby has logged that it is ready (imported, connected, stores open)."""
    log = stack.settings.data_dir / "worker.log"
    supervisor = stack.supervisor
    assert supervisor is not None  # supervised_stack's

    def ready() -> bool:
        pid = supervisor.standby_pid
        return pid is not None and f"standby {worker_identity(pid)} ready" in log.read_text()

    await wait_for(ready, timeout=120, what="a ready standby")


async def _crowd(stack: Stack, count: int, prefix: str, first: int) -> list[LocalConversation]:
    shoppers = await place_crowd(stack.settings, count, prefix=prefix, first_order=first)
    threads = local_thread_store(stack.settings)
    crowd = []
    for shopper in shoppers:
        OPENING[shopper.actor.user_id] = shopper.opening
        crowd.append(
            LocalConversation(stack.client, threads, stack.temporal.task_queue, shopper.actor)
        )
    return crowd


async def _kill(stack: Stack, kind: str) -> None:
    """SIGKILL the Worker and return once the supervisor reports its successor polling."""
    supervisor = stack.supervisor
    assert supervisor is not None  # supervised_stack's
    before = supervisor.last_report
    if kind == "unannounced":
        pid = supervisor.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the supervisor only sees a death
        await wait_for(
            lambda: supervisor.last_report is not before,
            timeout=120,
            interval=0.005,
            what="the standby to take over",
        )
    else:
        await request_worker_restart(stack.client, stack.temporal.control_task_queue)


async def drills(stack: Stack, count: int) -> dict[str, list[float]]:
    seconds: dict[str, list[float]] = {"/crash-worker": [], "unannounced": []}
    crowd = await _crowd(stack, count, "drill", 900000)
    for i, conv in enumerate(crowd):
        kind = ("/crash-worker", "unannounced")[i % 2]
        await _held(stack, [conv])
        await _standby_ready(stack)
        assert conv.handle is not None
        killed = time.time()
        await _kill(stack, kind)
        # Released once the successor polls: a Signal sent in the instant between a SIGKILL and
        # the supervisor's sticky reset waits out the server's sticky dispatch (about 10 s).
        await conv.handle.signal("release")
        await asyncio.wait_for(conv.handle.result(), 120)
        _, scheduled = await release_and_refund(conv.handle)
        assert scheduled is not None
        seconds[kind].append(scheduled.timestamp() - killed)
        print(f"  drill {i + 1:2d} {kind:<13} {seconds[kind][-1]:.3f} s", flush=True)
    return seconds


@dataclass
class Released:
    """One held conversation after its release, as the server stamped it (seconds from the
    crowd's first release Signal)."""

    signaled: float  # the release Signal is in its history
    task_scheduled: float  # the workflow task it caused is queued
    task_started: float  # a Worker polled it (the release takes it first from a dead queue)
    refund_scheduled: float  # that task completed, with issue_refund (and the grant read's marker)
    refund_started: float
    refund_completed: float
    # Workflow tasks after the release that failed, or timed out: started but not completed in
    # time (a Worker too busy to finish it), or queued on a dead Worker's sticky queue.
    task_retries: collections.Counter[str]


def _released(events: Iterable[HistoryEvent]) -> dict[str, Any]:
    """The events after the release Signal, by what they mean (the first of each)."""
    stamps: dict[str, Any] = {"retries": collections.Counter()}
    after = False
    for event in events:
        kind, at = event.event_type, event.event_time.ToDatetime()
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED and (
            event.workflow_execution_signaled_event_attributes.signal_name == "release"
        ):
            after = True
            stamps["signaled"] = at
        elif not after:
            continue
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            stamps.setdefault("task_scheduled", at)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            if "refund_scheduled" not in stamps:
                # The start of the task that went on to schedule the refund: one a dead Worker's
                # release took from its sticky queue, and failed, was not a Worker's.
                stamps["task_started"] = at
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            when = "after" if "refund_scheduled" in stamps else "before"
            failed = event.workflow_task_failed_event_attributes
            # What the Worker said (read_failures decrypted it), its first line.
            said = f"failed ({first_line(failed.failure.message)})"
            stamps["retries"][f"{said} {when} issue_refund"] += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            timeout = event.workflow_task_timed_out_event_attributes.timeout_type
            kind_name = TimeoutType.Name(timeout).removeprefix("TIMEOUT_TYPE_").lower()
            when = "after" if "refund_scheduled" in stamps else "before"
            stamps["retries"][f"{kind_name} {when} issue_refund"] += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and (
            event.activity_task_scheduled_event_attributes.activity_type.name == "issue_refund"
        ):
            stamps["refund_scheduled"] = at
            refund_event = event.event_id
        elif (
            kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            and "refund_scheduled" in stamps
            and event.activity_task_started_event_attributes.scheduled_event_id == refund_event
        ):
            stamps["refund_started"] = at
        elif (
            kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            and "refund_scheduled" in stamps
            and event.activity_task_completed_event_attributes.scheduled_event_id == refund_event
        ):
            stamps["refund_completed"] = at
    return stamps


def _phases(releases: list[dict[str, Any]]) -> list[Released]:
    zero = min(r["signaled"] for r in releases)

    def s(r: dict[str, Any], key: str) -> float:
        return (r[key] - zero).total_seconds()

    return [
        Released(
            s(r, "signaled"),
            s(r, "task_scheduled"),
            s(r, "task_started"),
            s(r, "refund_scheduled"),
            s(r, "refund_started"),
            s(r, "refund_completed"),
            r["retries"],
        )
        for r in releases
    ]


def _breakdown(phases: list[Released]) -> None:
    """Where the crowd's seconds go: each step's spread over the crowd, and the last of each."""
    steps = [
        ("release Signal received", [p.signaled for p in phases]),
        ("  -> workflow task queued", [p.task_scheduled - p.signaled for p in phases]),
        ("  -> task polled by a Worker (queue wait)",
         [p.task_started - p.task_scheduled for p in phases]),
        ("  -> issue_refund scheduled (replay + grant read)",
         [p.refund_scheduled - p.task_started for p in phases]),
        ("  -> issue_refund started", [p.refund_started - p.refund_scheduled for p in phases]),
        ("  -> issue_refund completed", [p.refund_completed - p.refund_started for p in phases]),
    ]  # fmt: skip
    print_steps("step (per conversation)", steps)
    for name, values in (
        ("last release Signal received", [p.signaled for p in phases]),
        ("last workflow task polled by a Worker", [p.task_started for p in phases]),
        ("last issue_refund scheduled", [p.refund_scheduled for p in phases]),
        ("last issue_refund completed", [p.refund_completed for p in phases]),
    ):
        print(f"  {name:<44} {max(values):7.3f}s after the first release", flush=True)
    retries = sum((p.task_retries for p in phases), collections.Counter())
    said = ", ".join(f"{kind} {n}" for kind, n in sorted(retries.items())) or "none"
    print(f"  workflow tasks failed or timed out after the release: {said}", flush=True)


async def held_crowd(
    stack: Stack, count: int, server: int, breakdown: bool = False
) -> list[Released]:
    """Each conversation's release step by step, in seconds from the first release Signal."""
    crowd = await _crowd(stack, count, "held", 950000)
    async with Sampler([server], interval=1.0) as hold:
        await _held(stack, crowd)
    print(f"  {count} held in {hold.seconds:.0f} s", flush=True)
    print(_server_usage("the hold", hold, server), flush=True)
    await _standby_ready(stack)
    handles = [c.handle for c in crowd if c.handle]
    async with Sampler([server], interval=1.0) as release:
        await _kill(stack, "unannounced")
        # At most IN_FLIGHT calls at once: 10,000 Signals sent together filled the dev server's
        # cache of workflow state ("cache capacity is fully occupied with pinned elements"), and
        # 10,000 waits for a result are as many long polls ("namespace concurrent poller limit
        # exceeded").
        await at_most(IN_FLIGHT, (functools.partial(h.signal, "release") for h in handles))
        await asyncio.wait_for(at_most(IN_FLIGHT, (h.result for h in handles)), RELEASE_TIMEOUT)
    print(_server_usage("the kill and release", release, server), flush=True)
    # Each history read once, for the release's clock, the breakdown and the plot.
    histories = await at_most(IN_FLIGHT, (h.fetch_history for h in handles))
    for history in histories:
        await read_failures(stack.client, history.events)
    # Every refund once, read from its owner: the ledger, which counts each call for a key.
    ids = {h.id for h in handles}
    made = [r for r in await refunds_made(stack.settings) if r.workflow_id in ids]
    if len(made) != count:
        raise RuntimeError(f"{len(made)} refunds in the ledger for {count} held conversations")
    asked_again = sum(r.calls > 1 for r in made)
    print(f"  refunds in the ledger: {len(made)}, asked more than once: {asked_again}", flush=True)
    print_worker_log(stack.settings.data_dir / "worker.log")
    # Seconds from the first release Signal, each conversation's steps read from its history.
    phases = _phases([_released(history.events) for history in histories])
    if breakdown:
        _breakdown(phases)
    return phases


def _server_pid(temporal: WorkflowEnvironment | TemporalSettings, stack: Stack) -> int:
    if isinstance(temporal, WorkflowEnvironment):
        return dev_server_pid(temporal)
    assert stack.server is not None and stack.server.pid is not None  # the stack started it
    return stack.server.pid


def _server_usage(phase: str, sampler: Sampler, server: int) -> str:
    cpu = sampler.usage.cpu[server]
    return (
        f"  the server over {phase}: peak RSS {sampler.usage.peak_rss[server] / 2**20:.0f} MB, "
        f"{cpu:.0f} CPU s ({cpu / sampler.seconds:.2f} cores)"
    )


def _row(name: str, values: list[float]) -> str:
    q = statistics.quantiles(values, n=10) if len(values) > 1 else values
    return (
        f"  {name:<13} p50 {statistics.median(values):.3f} s  p90 {q[-1]:.3f} s  "
        f"min {min(values):.3f}  max {max(values):.3f}  (n={len(values)})"
    )


def _plot(path: Path, drills: dict[str, list[float]], crowd: list[Released]) -> None:
    """One panel for each part that ran: the drills' spread, the held crowd's release."""
    from bench import plot

    panels = int(bool(drills)) + int(bool(crowd))
    fig, axes = plot.axes("Recovery after a Worker's SIGKILL", "", "", columns=panels)
    if drills:
        ax = axes.pop(0)
        ax.boxplot(list(drills.values()), tick_labels=list(drills), orientation="horizontal")
        ax.axvline(0.5, linestyle="--", color="grey", label="goal: p50 0.5 s")
        ax.set_title(f"{len(next(iter(drills.values())))} drills of each kind, warm standby")
        ax.set_xlabel("seconds from SIGKILL to issue_refund scheduled")
        ax.legend()
    if crowd:
        ax = axes.pop(0)
        # Where the release's time goes: each step's count over time, read across at any height.
        for label, at in (
            ("release Signal received", [c.signaled for c in crowd]),
            ("workflow task taken by a Worker", [c.task_started for c in crowd]),
            ("issue_refund scheduled", [c.refund_scheduled for c in crowd]),
        ):
            ax.step(sorted(at), range(1, len(at) + 1), where="post", label=label)
        ax.axvline(GOAL, linestyle="--", color="grey", label=f"goal: all within {GOAL:.0f} s")
        ax.set_title(f"{len(crowd):,} held conversations, all released at once")
        ax.set_xlabel("seconds from the first release Signal")
        ax.set_ylabel("conversations")
        ax.legend()
    print(f"plot: {plot.save(fig, path)}", flush=True)


async def main(
    count: int,
    held: int,
    plot: Path | None,
    breakdown: bool,
    workers: int,
    backend: str,
    server: str,
    server_memory: str | None,
) -> None:
    async with AsyncExitStack() as outside:
        temporal: WorkflowEnvironment | TemporalSettings
        if server == "test":
            started = await start_dev_server(memory_limit=server_memory)
            temporal = await outside.enter_async_context(started)
        else:  # the stack starts it, as `refund-bot run` does
            temporal = free_ports("held-crowd")
            temporal = temporal.model_copy(update={"server_memory_limit": server_memory})
        tmp = Path(outside.enter_context(tempfile.TemporaryDirectory()))
        database_url = None
        if backend == "postgresql":
            database_url = await outside.enter_async_context(postgres_database())
        print(
            f"stores: {backend}, Workers: {workers}, server: {server}, "
            f"its memory limit: {server_memory or 'unset'}",
            flush=True,
        )
        stack_of = supervised_stack(temporal, tmp, workers=workers, database_url=database_url)
        seconds: dict[str, list[float]] = {}
        crowd: list[Released] = []
        async with stack_of as stack:
            if count:
                print(f"{count} drills, SIGKILL to the next step (warm standby):", flush=True)
                seconds = await drills(stack, count)
                for kind, values in seconds.items():
                    print(_row(kind, values), flush=True)
            if held:
                crowd = await held_crowd(stack, held, _server_pid(temporal, stack), breakdown)
                took = max(c.refund_scheduled for c in crowd)
                print(
                    f"{held} held conversations, Worker SIGKILLed, all released: last refund "
                    f"scheduled {took:.2f} s after the first release",
                    flush=True,
                )
        if plot:
            _plot(plot, seconds, crowd)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drills", type=int, default=20)
    parser.add_argument("--held", type=int, default=200)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="after the held crowd, where its seconds went, step by step (server timestamps)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="Worker processes polling at once (REFUND_BOT_WORKERS); the kill takes the first",
    )
    parser.add_argument(
        "--backend",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="the stores: SQLite files, or one PostgreSQL database (pgserver)",
    )
    parser.add_argument(
        "--server",
        choices=("test", "embedded"),
        default="test",
        help="test: the SDK's dev server, its database in memory; embedded: the server "
        "`refund-bot run` starts, its SQLite database in a file",
    )
    parser.add_argument(
        "--server-memory",
        type=go_size,
        default=None,
        metavar="LIMIT",
        help="Go's soft memory limit for the server, as TEMPORAL_SERVER_MEMORY_LIMIT takes it "
        "(350MiB, off); unset by default",
    )
    args = parser.parse_args()
    run_benchmark(
        main(
            args.drills,
            args.held,
            args.plot,
            args.breakdown,
            args.workers,
            args.backend,
            args.server,
            args.server_memory,
        )
    )

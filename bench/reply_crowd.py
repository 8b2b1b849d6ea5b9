"""A crowd of replies: N open conversations, and every customer answers at the same moment.

    N conversations opened (each asked its first question) -> N replies, sent together as the
    router's Signal -> each answered (the agent's next question posted in its thread) -> every
    history read: workflow tasks that timed out, and why; where each reply's seconds went

What a support desk sees after an outage upstream of it (a chat platform's resend of everything
it held, a marketing mail that lands in 10,000 inboxes at once): the Worker as shipped, on the
server `refund-bot run` embeds, with its warm standby. The variants are settings of the same
stack: the Worker's cache (`--cache`, WORKER_CACHED_CONVERSATIONS), how long a task waits on
its Worker's sticky queue (`--sticky`, WORKER_STICKY_TIMEOUT), the Worker processes
(`--workers`, REFUND_BOT_WORKERS), the stores (`--backend postgresql`: one PostgreSQL database,
started here from the pgserver wheel's binaries, for every store) and the server's memory limit
(`--server-memory`, TEMPORAL_SERVER_MEMORY_LIMIT).

Answered is the post of the next question, as the local platform stored it (the Worker's clock,
the same host's as the sender's). Each reply's history gives the server's side of its way (the
Signal received, its workflow task queued, timed out on a sticky queue, started by a Worker,
completed), printed step by step and as a timeline of the crowd. The replies go as Signals: the
router's Update waits at most a second for a Worker to accept it and then sends the same Signal,
which is what a crowd this size gets.

    .venv/bin/python -m bench.reply_crowd [--open 10000] [--cache 1000 [10000 ...]]
        [--server-memory off [350MiB ...]] [--sticky 10] [--workers 1]
        [--backend sqlite|postgresql] [--in-flight 200]
        [--plot docs/img/reply_crowd.png] [--keep RUN.json] [--beside EARLIER.json ...]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import itertools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHandle

from agent.models import CustomerMessage
from agent.settings import AgentSettings
from bench import percentile, print_steps, read_failures, run_benchmark
from bench.open_recovery import CUSTOMERS, open_conversations, retries_in
from bench.proc import Sampler, cpu_seconds, rss_bytes
from bench.server import free_ports, go_size
from bench.warnings import print_worker_log
from harness.codec import with_test_keys
from harness.crowd import at_most
from harness.postgres import postgres_database
from harness.stack import child_env
from refund_bot.app import running_stack
from refund_bot.wiring import local_thread_store

ANSWER_TIMEOUT = 1800.0  # a crowd that is not answered in half an hour is a failed run
GOAL = 60.0  # seconds for the last of 10,000 replies
WINDOWS = (1, 2, 5, 10, 20, 30, 60)  # seconds a row of the crowd's timeline: 15 rows at most
IN_FLIGHT = 200  # replies sent at once by default: what one client connection carries well


@dataclass
class Reply:
    """One reply's way through Temporal: server timestamps, epoch seconds, from its history."""

    signaled: float = 0.0  # the reply's Signal in the history
    queued: float = 0.0  # the first workflow task scheduled after it
    sticky_timeouts: list[float] = field(default_factory=list)  # a task left on a sticky queue
    started: float = 0.0  # the start of the task that completed: the one that answered
    completed: float = 0.0
    answered: float = 0.0  # the next question's post, as the platform stored it


def _reply(events: Iterable[HistoryEvent]) -> Reply:
    reply = Reply()
    last_started = 0.0
    for event in events:
        kind, at = event.event_type, event.event_time.ToNanoseconds() / 1e9
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            reply = Reply(signaled=at)  # the last Signal is the reply: the history ends with it
        elif not reply.signaled or reply.completed:
            continue
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            reply.queued = reply.queued or at
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            timeout = event.workflow_task_timed_out_event_attributes.timeout_type
            if timeout == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START:
                reply.sticky_timeouts.append(at)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            last_started = at
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            reply.started, reply.completed = last_started, at
    return reply


def _breakdown(replies: list[Reply], zero: float) -> None:
    """Where the crowd's seconds went: each step's spread, then a timeline of the whole crowd."""
    steps = [
        ("reply's Signal received (from the first sent)", [r.signaled - zero for r in replies]),
        ("  -> workflow task queued", [r.queued - r.signaled for r in replies]),
        ("  -> answering task started (queue wait)", [r.started - r.queued for r in replies]),
        ("  -> next question posted (Worker turn)", [r.answered - r.started for r in replies]),
        ("  -> task completed", [r.completed - r.answered for r in replies]),
    ]
    print_steps("step (per reply)", steps)
    timed_out = sum(bool(r.sticky_timeouts) for r in replies)
    print(f"  replies whose task timed out on a sticky queue: {timed_out}", flush=True)
    columns = {
        "Signals received": [r.signaled for r in replies],
        "tasks queued": [r.queued for r in replies],
        "sticky timeouts": [t for r in replies for t in r.sticky_timeouts],
        "answering tasks started": [r.started for r in replies],
        "answered": [r.answered for r in replies],
    }
    print(f"  seconds  {'  '.join(f'{name:>23}' for name in columns)}", flush=True)
    last = max(max(times) for times in columns.values() if times) - zero
    width = next((w for w in WINDOWS if last / w < 15), WINDOWS[-1])
    rows = [
        collections.Counter(int((t - zero) // width) for t in times) for times in columns.values()
    ]
    for row in range(int(last // width) + 1):
        counts = "  ".join(f"{in_row[row]:>23}" for in_row in rows)
        print(f"  {row * width:4d}-{(row + 1) * width:<3d}{counts}", flush=True)


@dataclass(frozen=True)
class Variant:
    """One run's settings of the stack as shipped, each named for the setting it is."""

    cache: int  # WORKER_CACHED_CONVERSATIONS
    workers: int  # REFUND_BOT_WORKERS
    backend: str  # sqlite, or postgresql for every store
    sticky: float  # WORKER_STICKY_TIMEOUT, seconds
    in_flight: int  # replies sent at once
    server_memory: str | None  # TEMPORAL_SERVER_MEMORY_LIMIT, None for unset

    @property
    def label(self) -> str:
        """The run's name in the plot and the --keep file."""
        label = (
            f"cache {self.cache:,}, sticky timeout {self.sticky:g} s, {self.workers} Worker(s), "
            f"{self.backend}"
        )
        if self.server_memory is not None:
            label += f", server memory limit {self.server_memory}"
        return label


async def crowd(n: int, variant: Variant) -> list[float]:
    """One variant on a stack of its own: seconds from the first Signal to each answer."""
    async with AsyncExitStack() as outside:
        data_dir = Path(outside.enter_context(tempfile.TemporaryDirectory()))
        env = {
            "WORKER_CACHED_CONVERSATIONS": str(variant.cache),
            "WORKER_STICKY_TIMEOUT": f"{variant.sticky}s",
        }
        if variant.backend == "postgresql":
            env["DATABASE_URL"] = await outside.enter_async_context(postgres_database())
        settings = with_test_keys(
            AgentSettings(_env_file=None, data_dir=data_dir, DATABASE_URL=env.get("DATABASE_URL"))  # type: ignore[arg-type]
        )
        temporal = free_ports("reply-crowd")
        if variant.server_memory is not None:
            temporal = temporal.model_copy(update={"server_memory_limit": variant.server_memory})
        stack = await outside.enter_async_context(
            running_stack(
                temporal, settings, worker_env=child_env(data_dir, env), workers=variant.workers
            )
        )
        supervisor = stack.supervisor
        assert supervisor is not None and stack.server is not None
        server = stack.server.pid
        assert server is not None
        opened = time.monotonic()
        handles = await open_conversations(stack, n, "crowd", 2_000_000)
        workers_pids = list(supervisor.pids)
        print(
            f"{n} conversations open in {time.monotonic() - opened:.0f} s ({variant.label}"
            f"{'' if variant.server_memory else ', server memory limit unset'}); Worker RSS "
            f"{', '.join(f'{rss_bytes(p) / 2**20:.0f}' for p in workers_pids)} MB; server RSS "
            f"{rss_bytes(server) / 2**20:.0f} MB; load average {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        threads = local_thread_store(stack.settings)
        seen = max((m.seq for m in await threads.messages()), default=0)
        thread_of = {h.id: h.id.split("-", 1)[1] for h in handles}
        pids = [server, *workers_pids]
        cpu_before = {p: cpu_seconds(p) for p in pids}
        answered: dict[str, datetime] = {}
        async with Sampler(pids) as sampler:

            async def reply(handle: WorkflowHandle) -> None:
                message = CustomerMessage(
                    message_id=f"reply-{handle.id}", author=CUSTOMERS[handle.id], text="Yes"
                )
                await handle.signal("customer_message", message)

            started = time.time()
            # `in_flight` at a time (IN_FLIGHT unless --in-flight says otherwise).
            sending = asyncio.ensure_future(
                at_most(variant.in_flight, (functools.partial(reply, h) for h in handles))
            )
            waiting = set(thread_of.values())
            deadline = time.monotonic() + ANSWER_TIMEOUT
            while waiting and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                for message in await threads.messages(after_seq=seen):
                    seen = max(seen, message.seq)
                    if message.author_is_bot and message.thread_id in waiting:
                        waiting.discard(message.thread_id)
                        answered[message.thread_id] = datetime.fromisoformat(message.created_at)
            await sending
            sent_in = time.time() - started
        if waiting:
            raise SystemExit(
                f"{len(waiting)} of {n} replies not answered in {ANSWER_TIMEOUT:.0f} s"
            )
        took = sorted(a.timestamp() - started for a in answered.values())
        # Each history read once, for the timeouts and the breakdown both.
        histories = await at_most(20, (h.fetch_history for h in handles))
        retries: collections.Counter[str] = collections.Counter()
        replies: list[Reply] = []
        for handle, history in zip(handles, histories, strict=True):
            await read_failures(stack.client, history.events)
            retries.update(retries_in(history.events))
            way = _reply(history.events)
            way.answered = answered[thread_of[handle.id]].timestamp()
            replies.append(way)
        cores = {p: (cpu_seconds(p) - cpu_before[p]) / took[-1] for p in pids}
        print(
            f"  {n} replies sent in {sent_in:.1f} s; answered from the first Signal: p50 "
            f"{statistics.median(took):.1f} s, p90 {percentile(took, 90):.1f} s, p99 "
            f"{percentile(took, 99):.1f} s, last {took[-1]:.1f} s ({n / took[-1]:.0f} a second)",
            flush=True,
        )
        print_worker_log(data_dir / "worker.log")
        print(
            f"  workflow tasks failed or timed out after the reply: "
            f"{', '.join(f'{k} {v}' for k, v in sorted(retries.items())) or 'none'}",
            flush=True,
        )
        print(
            f"  cores used until the last answer: server {cores[server]:.2f}, Worker(s) "
            f"{', '.join(f'{cores[p]:.2f}' for p in workers_pids)}; peak RSS: server "
            f"{sampler.usage.peak_rss[server] / 2**20:.0f} MB, Worker(s) "
            f"{', '.join(f'{sampler.usage.peak_rss[p] / 2**20:.0f}' for p in workers_pids)} MB",
            flush=True,
        )
        _breakdown(replies, started)
        return took


def _plot(path: Path, n: int, curves: dict[str, list[float]]) -> None:
    from bench import plot

    drawn = plot.cdf_figure(
        path,
        f"{n:,} replies sent at once: when each was answered",
        "seconds from the first reply's Signal",
        "share of replies answered",
        curves,
        [(GOAL, f"goal: all within {GOAL:.0f} s")],
    )
    print(f"plot: {drawn}", flush=True)


def _kept(paths: list[Path]) -> tuple[dict[str, list[float]], list[Path]]:
    """The runs kept in those of `paths` that exist, and the paths that do not."""
    curves: dict[str, list[float]] = {}
    missing: list[Path] = []
    for path in paths:
        if not path.exists():
            missing.append(path)
            continue
        curves.update(json.loads(path.read_text()))
    return curves, missing


def _keep(path: Path, label: str, took: list[float]) -> None:
    kept, _ = _kept([path])  # the first run kept in a file starts it
    path.write_text(json.dumps({**kept, label: took}))


async def main(
    n: int, variants: list[Variant], plot_path: Path | None, keep: Path | None, earlier: list[Path]
) -> None:
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)", flush=True)
    # Runs kept by --keep before, drawn beside this one's. `make bench` names the file its
    # `reply_crowd` entry keeps; run alone, this entry has none, and says so.
    curves, missing = _kept(earlier)
    if missing:
        names = ", ".join(map(str, missing))
        print(f"not drawn beside this run (no such file): {names}", flush=True)
    for variant in variants:
        took = await crowd(n, variant)
        curves[variant.label] = took
        if keep is not None:
            _keep(keep, variant.label, took)
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)
    if plot_path is not None:
        _plot(plot_path, n, curves)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--open", type=int, default=10_000)
    parser.add_argument(
        "--cache",
        type=int,
        nargs="+",
        default=[1000],
        help="WORKER_CACHED_CONVERSATIONS: each value a run on a fresh stack, in turn",
    )
    parser.add_argument(
        "--server-memory",
        type=go_size,
        nargs="+",
        default=[None],
        help="TEMPORAL_SERVER_MEMORY_LIMIT (350MiB, off): each a run on a fresh stack, in turn",
    )
    parser.add_argument("--workers", type=int, default=1, help="REFUND_BOT_WORKERS")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--sticky", type=float, default=10.0, help="WORKER_STICKY_TIMEOUT, seconds")
    parser.add_argument(
        "--in-flight", type=int, default=IN_FLIGHT, help="replies sent at once (Signals in flight)"
    )
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument(
        "--keep", type=Path, default=None, help="a JSON file each variant's answer times go into"
    )
    parser.add_argument(
        "--beside", type=Path, nargs="*", default=[], help="earlier runs' --keep files to plot too"
    )
    args = parser.parse_args()
    variants = [
        Variant(cache, args.workers, args.backend, args.sticky, args.in_flight, server_memory)
        for cache, server_memory in itertools.product(args.cache, args.server_memory)
    ]
    run_benchmark(main(args.open, variants, args.plot, args.keep, args.beside))

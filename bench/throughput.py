"""Throughput, CPU and memory against concurrent conversations: refund-bot and the reference demo.

    N conversations started together -> W Worker processes (`refund-bot worker`, or the reference's
    own Worker from --reference) on one dev server -> every run closed (visibility) -> /proc

The reference is temporal-community/agent-memory-and-state, run from a checkout the reader makes
(docs/benchmarks.md says how) with its own virtualenv: its Worker (`python -m refund_agent.worker`,
unchanged: sync Activities on a 10-thread pool) in dry-run mode with its deterministic policy. Both
tell the same story: the customer asks for a refund of the plush python, answers "Yes" (opened)
and "Split seam" (the damage), the agent looks up the order and the customer's history and issues
the refund on its own. Each conversation is started and sent both answers at once (the reference
keys answers by question, refund-bot queues a customer's messages in order), so no driver waits
between steps on either side. refund-bot's conversations each have a fresh customer and order
(placed before the clock starts), as `refund-bot demo`'s do, so every one refunds on its own.

For each number of conversations and of Workers, refund-bot and the reference run one after the
other (which goes first alternates), on fresh task queues of one embedded dev server (the server
`refund-bot run` starts: SQLite in a file). Measured per cell: conversations per second (the
first start to the last close, server timestamps), CPU seconds per conversation of the Workers and
the server (utime + stime from /proc over the window), peak RSS. Afterwards every run must have
completed and each side's ledger must hold exactly one refund per conversation.

    .venv/bin/python -m bench.throughput --reference PATH [--conversations 100 500 1000]
        [--workers 1 2] [--reference-python PATH/.venv/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from temporalio.client import Client, WorkflowExecutionStatus

from agent.models import ConversationStart, CustomerMessage, ThreadRef
from agent.settings import AgentSettings
from agent.versions import version_attributes
from agent.workflow import RefundConversation
from bench import run_benchmark
from bench.history_size import payload_bytes
from bench.plot import axes, default_path, save
from bench.proc import Sampler, wait_idle
from bench.server import embedded_server
from bench.warnings import logged_warnings
from bench.workers import reference_worker, refund_bot_worker, wait_polling
from demo.parts import ANSWERS, place_demo_customer
from harness.codec import TEST_CONVERTER
from harness.owner import refunds_made
from refund_bot.wiring import local_thread_store
from worker.lifecycle import terminate
from worker.runner import prepare_stores
from worker.server import EmbeddedTemporal, log_tail

REFUND_BOT = "refund-bot"
REFERENCE = "reference"
# A cell that has not closed every conversation by then fails the benchmark.
CELL_TIMEOUT = 1200.0
# The reference's question ids, in the order its policy asks them.
REFERENCE_QUESTIONS = ("item_opened", "damage")
# The plush python, as the reference's lookup_order describes it (under its auto-approve limit).
REFERENCE_AMOUNT = 8000


@dataclass
class Cell:
    side: str
    conversations: int
    workers: int
    seconds: float = 0.0
    worker_cpu: float = 0.0
    server_cpu: float = 0.0
    driver_cpu: float = 0.0  # this benchmark's own process: starting, answering, counting
    worker_rss: int = 0  # the Workers' peak RSS, summed
    server_rss: int = 0
    pids: list[int] = field(default_factory=list)
    # One conversation's Event History: events, payload bytes as stored, and the whole history's
    # size as the server counts it (DescribeWorkflowExecution's history_size_bytes).
    events: int = 0
    history_bytes: int = 0
    history_size: int = 0
    # Refunds whose owner was asked more than once (a retried attempt): the key returned the same
    # refund, but a retry under load is a timeout set too short.
    retried: int = 0
    warnings: str = "none"  # what refund-bot's Worker logged at WARNING and above

    @property
    def per_second(self) -> float:
        return self.conversations / self.seconds

    def row(self) -> str:
        n = self.conversations
        return (
            f"  {self.side:<11} N={n:<5} W={self.workers}  {self.per_second:6.2f} conv/s  "
            f"({self.seconds:6.1f} s)   CPU/conv Worker {self.worker_cpu / n:.3f} s, server "
            f"{self.server_cpu / n:.3f} s   cores used: Workers "
            f"{self.worker_cpu / self.seconds:.2f}, server {self.server_cpu / self.seconds:.2f}, "
            f"driver {self.driver_cpu / self.seconds:.2f}"
            f"   peak RSS: Workers "
            f"{self.worker_rss / 2**20:.0f} MB, server {self.server_rss / 2**20:.0f} MB   "
            f"one history: {self.events} events, {self.history_bytes:,d} payload bytes, "
            f"{self.history_size:,d} bytes in all   refunds asked more than once: {self.retried}"
            f"   Worker warnings: {self.warnings}"
        )


@dataclass
class Bench:
    address: str
    server_pid: int
    data_dir: Path
    reference: Path
    reference_python: Path
    clients: dict[str, Client] = field(default_factory=dict)
    settings: AgentSettings | None = None


async def _workers(
    bench: Bench, side: str, queue: str, count: int
) -> list[asyncio.subprocess.Process]:
    log = bench.data_dir / f"{queue}.log"
    procs = []
    for i in range(count):
        if side == REFUND_BOT:
            proc = await refund_bot_worker(bench.address, queue, bench.data_dir / REFUND_BOT, log)
        else:
            state = bench.data_dir / REFERENCE / f"{queue}-{i}"
            proc = await reference_worker(
                bench.reference_python, bench.reference, bench.address, queue, state, log
            )
        procs.append(proc)
    await wait_polling(bench.clients[side], queue, procs, log)
    return procs


async def _refund_bot_starts(bench: Bench, queue: str, n: int) -> list[Callable[[], Awaitable]]:
    """Each conversation's customer, order and messages in the local thread, placed before the
    clock starts (a chat platform holds the customer's messages, not refund-bot's stores); in the
    measured window only what the router does: Signal-with-start, then a Signal per answer."""
    assert bench.settings is not None
    threads = local_thread_store(bench.settings)
    client = bench.clients[REFUND_BOT]

    async def one(start: ConversationStart, messages: list[CustomerMessage]) -> None:
        handle = await client.start_workflow(
            RefundConversation.run,
            start,
            id=f"{queue}-{start.thread.thread}",
            task_queue=queue,
            search_attributes=version_attributes(),  # as the router starts them
            start_signal="customer_message",
            start_signal_args=[messages[0]],
        )
        for message in messages[1:]:
            await handle.signal(RefundConversation.customer_message, message)

    starts: list[Callable[[], Awaitable[None]]] = []
    for _ in range(n):
        customer, order = await place_demo_customer(bench.settings)
        opening = f"please refund order {order.order_number}"
        root = await threads.open_thread("support", customer.user_id, opening)
        replies = [await threads.add_reply(root.thread_id, customer.user_id, a) for a in ANSWERS]
        start = ConversationStart(
            thread=ThreadRef(
                platform="local", workspace="local", channel="support", thread=root.thread_id
            ),
            customer=customer,
            opening_message_id=root.message_id,
            opening_text=opening,
        )
        messages = [
            CustomerMessage(message_id=m.message_id, author=customer, text=m.text)
            for m in (root, *replies)
        ]
        starts.append(functools.partial(one, start, messages))
    return starts


async def _reference_starts(bench: Bench, queue: str, n: int) -> list[Callable[[], Awaitable]]:
    client = bench.clients[REFERENCE]

    async def one(i: int) -> None:
        request_id = f"{queue}-{i}"
        request = {
            "request_id": request_id,
            "order_id": "1234",
            "customer_id": "cus_nyghtowl",
            "payment_intent_id": f"pi_demo_{request_id}",
            "amount_cents": REFERENCE_AMOUNT,
            "reason": "damaged on arrival",
            "dry_run": True,
            "interactive_questions": True,
            "use_canned_agent": True,
        }
        handle = await client.start_workflow(
            "RefundApprovalAgent", request, id=request_id, task_queue=queue
        )
        for question, answer in zip(REFERENCE_QUESTIONS, ANSWERS, strict=True):
            await handle.signal("answer_question", args=[question, answer])

    return [functools.partial(one, i) for i in range(n)]


# A queue's conversations.
_CONVERSATIONS = "TaskQueue = '{}'"


async def _count(client: Client, queue: str, condition: str) -> int:
    return (await client.count_workflows(f"{_CONVERSATIONS.format(queue)} AND {condition}")).count


async def _reference_refunds(bench: Bench, queue: str) -> int:
    total = 0
    for ledger in (bench.data_dir / REFERENCE).glob(f"{queue}-*/effect-ledger.json"):
        total += sum(r["calls"] for r in json.loads(ledger.read_text())["refunds"].values())
    return total


async def _reference_retried(bench: Bench, queue: str) -> int:
    total = 0
    for ledger in (bench.data_dir / REFERENCE).glob(f"{queue}-*/effect-ledger.json"):
        total += sum(r["calls"] > 1 for r in json.loads(ledger.read_text())["refunds"].values())
    return total


async def cell(bench: Bench, side: str, n: int, w: int) -> Cell:
    queue = f"{side}-{n}-{w}-{uuid.uuid4().hex[:6]}"
    client = bench.clients[side]
    settings = bench.settings
    assert settings is not None  # main sets it before the first cell
    before = len(await refunds_made(settings)) if side == REFUND_BOT else 0
    prepare = _refund_bot_starts if side == REFUND_BOT else _reference_starts
    starts = await prepare(bench, queue, n)
    procs = await _workers(bench, side, queue, w)
    try:
        pids = [p.pid for p in procs]
        for pid in [*pids, bench.server_pid]:
            await wait_idle(pid, quiet=0.5, within=30)
        result = Cell(side, n, w, pids=pids)
        async with Sampler([*pids, bench.server_pid, os.getpid()]) as sampler:
            await asyncio.gather(*(start() for start in starts))
            deadline = time.monotonic() + CELL_TIMEOUT
            while await _count(client, queue, "ExecutionStatus = 'Running'") > 0 or (
                await _count(client, queue, "ExecutionStatus != 'Running'") < n
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{side}: not every conversation closed in {queue}")
                await asyncio.sleep(0.25)
        first: datetime | None = None
        last: datetime | None = None
        sample: str | None = None
        statuses: dict[WorkflowExecutionStatus | None, int] = {}
        async for run in client.list_workflows(_CONVERSATIONS.format(queue)):
            statuses[run.status] = statuses.get(run.status, 0) + 1
            sample = sample or run.id
            first = min(first or run.start_time, run.start_time)
            closed = run.close_time
            assert closed is not None  # none is running any more (the loop above)
            last = max(last or closed, closed)
        if statuses != {WorkflowExecutionStatus.COMPLETED: n}:
            raise RuntimeError(f"{side} {queue}: not all {n} completed: {statuses}")
        assert sample is not None and first is not None and last is not None  # n >= 1 runs
        refunds = (
            len(await refunds_made(settings)) - before
            if side == REFUND_BOT
            else await _reference_refunds(bench, queue)
        )
        if refunds != n:
            raise RuntimeError(f"{side} {queue}: {refunds} refunds for {n} conversations")
        if side == REFUND_BOT:
            made = await refunds_made(settings)
            result.retried = sum(
                r.workflow_id.startswith(f"{queue}-") and r.calls > 1 for r in made
            )
            result.warnings = logged_warnings(bench.data_dir / f"{queue}.log")
        else:
            result.retried = await _reference_retried(bench, queue)
        handle = client.get_workflow_handle(sample)
        history = await handle.fetch_history()
        result.events, result.history_bytes = len(history.events), payload_bytes(history)
        described = (await handle.describe()).raw_description.workflow_execution_info
        result.history_size = described.history_size_bytes
        result.seconds = (last - first).total_seconds()
        result.worker_cpu = sum(sampler.usage.cpu[p] for p in pids)
        result.server_cpu = sampler.usage.cpu[bench.server_pid]
        result.driver_cpu = sampler.usage.cpu[os.getpid()]
        result.worker_rss = sum(sampler.usage.peak_rss[p] for p in pids)
        result.server_rss = sampler.usage.peak_rss[bench.server_pid]
        return result
    finally:
        for proc in procs:
            await terminate(proc, grace=10)


def check_reference(reference: Path) -> None:
    if not (reference / "src" / "refund_agent" / "workflow.py").exists():
        raise SystemExit(f"--reference {reference}: no src/refund_agent/workflow.py there")


@asynccontextmanager
async def both_sides(
    reference: Path, reference_python: Path, data_dir: Path
) -> AsyncIterator[tuple[Bench, EmbeddedTemporal]]:
    """One embedded dev server, refund-bot's stores and a client for each side: what every cell
    runs on (bench.history_size runs one conversation a side on it too)."""
    async with embedded_server(data_dir / "temporal") as server:
        assert server.pid is not None
        bench = Bench(server.address, server.pid, data_dir, reference, reference_python)
        bench.settings = AgentSettings(
            _env_file=None,
            data_dir=data_dir / REFUND_BOT,
            stripe_api_key=None,
        )
        await prepare_stores(bench.settings)
        bench.clients = {
            REFUND_BOT: await Client.connect(server.address, data_converter=TEST_CONVERTER),
            REFERENCE: await Client.connect(server.address),
        }
        yield bench, server


async def main(
    reference: Path, reference_python: Path, sizes: list[int], workers: list[int], plot: Path
) -> None:
    check_reference(reference)
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)", flush=True)
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with both_sides(reference, reference_python, Path(tmp)) as (bench, server):
            turn = 0
            for n in sizes:
                for w in workers:
                    sides = [REFUND_BOT, REFERENCE] if turn % 2 == 0 else [REFERENCE, REFUND_BOT]
                    turn += 1
                    for side in sides:
                        try:
                            cells.append(await cell(bench, side, n, w))
                        except Exception:
                            # The server's own account, before its directory is removed.
                            print(f"{side} N={n} W={w} failed; the server's log ends:\n"
                                  f"{log_tail(server.log_path, 40)}", flush=True)  # fmt: skip
                            raise
                        print(cells[-1].row(), flush=True)
                    pair = {c.side: c for c in cells[-2:]}
                    ours, theirs = pair[REFUND_BOT], pair[REFERENCE]
                    print(
                        f"  refund-bot / reference, N={n} W={w}: "
                        f"{ours.per_second / theirs.per_second:.2f}x conversations per second, "
                        f"CPU per conversation Worker {ours.worker_cpu / theirs.worker_cpu:.2f}x, "
                        f"server {ours.server_cpu / theirs.server_cpu:.2f}x",
                        flush=True,
                    )
                    # Drawn after every pair: a run cut short still leaves its figures plotted.
                    _plot(cells, workers, plot)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"plot: {plot}")


def _plot(cells: list[Cell], workers: list[int], path: Path) -> None:
    fig, (rate, cpu, rss) = axes("Conversations started together", "conversations", "", columns=3)
    rate.set_ylabel("conversations per second")
    cpu.set_ylabel("CPU seconds per conversation (Workers + server)")
    rss.set_ylabel("peak RSS, Workers summed (MB)")
    for side in (REFUND_BOT, REFERENCE):
        for w in workers:
            mine = sorted(
                (c for c in cells if c.side == side and c.workers == w),
                key=lambda c: c.conversations,
            )
            label = f"{side}, {w} Worker{'s' if w > 1 else ''}"
            xs = [c.conversations for c in mine]
            rate.plot(xs, [c.per_second for c in mine], marker="o", label=label)
            cpu.plot(
                xs, [(c.worker_cpu + c.server_cpu) / c.conversations for c in mine], marker="o"
            )
            rss.plot(xs, [c.worker_rss / 2**20 for c in mine], marker="o")
    rate.legend()
    save(fig, path)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, required=True, help="a checkout of the reference")
    parser.add_argument(
        "--reference-python", type=Path, help="its virtualenv's python (PATH/.venv/bin/python)"
    )
    parser.add_argument("--conversations", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--plot", type=Path, default=default_path("throughput"))
    args = parser.parse_args()
    reference = args.reference.resolve()
    python = args.reference_python or reference / ".venv" / "bin" / "python"
    run_benchmark(main(reference, python, args.conversations, args.workers, args.plot))

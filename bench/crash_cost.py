"""The cost of a crash: refund-bot against the same agent as a plain in-process loop.

    for each step K of the story, a fresh customer and order, then a SIGKILL right after step K:
      plain loop   bench.plain_loop, killed after its K-th step returns, started again at once
      refund-bot   `refund-bot worker`, killed once Event History shows its K-th step completed
                   (an Activity, or a local Activity's marker), a new Worker started at once
    -> read afterwards from the owners: questions posted twice (the thread), decide calls made
       twice (the plain loop's call log; the Workers' logs), refund calls made twice and refunds
       made twice (the ledger), and what the customer was told last

The story is `refund-bot demo`'s: "please refund order N", the agent asks whether the package was
opened and what was damaged (the customer answers each question when it is posted, every time it
is posted), looks up the order and the customer's history, decides, reads the authorization live,
refunds and says so: 12 steps. A first run of each with no crash gives the calls a story takes; a
call beyond those is a call made twice. Without `refund-bot run`'s supervisor, nothing resets the
dead Worker's sticky queue, so a resumed conversation may first wait out the 2 s sticky timeout
(and an Activity that was running, its heartbeat or start-to-close timeout): the seconds printed
are not the recovery benchmark's (bench.crash_drill), the counts are the point.

    .venv/bin/python -m bench.crash_cost
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agent.models import Actor, OrderDetails
from agent.policy import QUESTIONS
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from agent.stores.ledger import Ledger
from bench import history_as_written, run_benchmark
from bench.server import embedded_server
from bench.workers import refund_bot_worker, wait_polling
from bot.local.thread_store import LocalThreadStore
from demo.parts import ANSWERS, place_demo_customer
from harness.codec import TEST_CONVERTER, with_test_keys
from harness.conversation import LocalConversation
from refund_bot.wiring import local_thread_store
from worker.lifecycle import spawn_child, terminate
from worker.runner import prepare_stores

ANSWER_TO = {QUESTIONS["item_opened"]: ANSWERS[0], QUESTIONS["damage"]: ANSWERS[1]}
TIMEOUT = 300.0
STEP_EVENTS = (
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
    EventType.EVENT_TYPE_MARKER_RECORDED,  # a local Activity's result
)


@dataclass
class Cost:
    questions_twice: int
    decides_twice: int
    refund_calls_twice: int
    refunds_twice: int
    told: str
    seconds: float


class Customer:
    """Answers each question the agent posts in the thread, once per post."""

    def __init__(
        self, threads: LocalThreadStore, thread: str, answer: Callable[[str], Awaitable[object]]
    ) -> None:
        self.threads, self.thread, self.answer = threads, thread, answer
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        seen = 0
        while True:
            for message in await self.threads.messages(self.thread, after_seq=seen):
                seen = max(seen, message.seq)
                if message.author_is_bot and message.text in ANSWER_TO:
                    await self.answer(ANSWER_TO[message.text])
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        """Stop answering; a failure to answer is the benchmark's failure."""
        if self.task.done():
            self.task.result()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def _thread_facts(threads: LocalThreadStore, thread: str) -> tuple[int, str]:
    bot = [m for m in await threads.messages(thread) if m.author_is_bot]
    questions = [m.text for m in bot if m.kind == "question"]
    return len(questions) - len(set(questions)), bot[-1].text if bot else ""


async def _refunds(settings: AgentSettings, order: OrderDetails) -> tuple[int, int]:
    """(refunds made, refund calls made) on the order's payment, as the ledger counts them."""
    mine = [
        r
        for r in await Ledger(database_for(settings)).all_refunds()
        if r.payment_ref == order.payment_ref
    ]
    return len(mine), sum(r.calls for r in mine)


@dataclass
class Harness:
    address: str
    client: Client
    settings: AgentSettings
    data_dir: Path

    async def fresh(self) -> tuple[Actor, OrderDetails]:
        return await place_demo_customer(self.settings)

    async def plain(self, crash_after: int) -> tuple[Cost, dict[str, int], bool]:
        customer, order = await self.fresh()
        threads = local_thread_store(self.settings)
        opening = f"please refund order {order.order_number}"
        root = await threads.open_thread("support", customer.user_id, opening)
        calls = self.data_dir / f"plain-{root.thread_id}.calls"

        async def answer(text: str) -> None:
            await threads.add_reply(root.thread_id, customer.user_id, text)

        argv = [
            sys.executable,
            "-m",
            "bench.plain_loop",
            "--data-dir",
            str(self.settings.data_dir),
            "--thread",
            root.thread_id,
            "--customer",
            customer.user_id,
            "--opening",
            opening,
            "--calls",
            str(calls),
        ]
        started = time.monotonic()
        crashed = False
        customer_side = Customer(threads, root.thread_id, answer)
        try:
            for crash in (crash_after, 0):
                proc = await spawn_child(
                    [*argv, "--crash-after", str(crash)], on_parent_death=signal.SIGKILL
                )
                code = await asyncio.wait_for(proc.wait(), TIMEOUT)
                if code == -signal.SIGKILL:
                    crashed = True
                    continue  # started again at once, as a supervisor would
                if code != 0:
                    raise RuntimeError(f"the plain loop exited with {code}")
                break
        finally:
            await customer_side.stop()
        made = Counter(calls.read_text().split())
        twice, told = await _thread_facts(threads, root.thread_id)
        refunds, _ = await _refunds(self.settings, order)
        cost = Cost(
            twice,
            made["decide_next_step"],
            made["issue_refund"],
            refunds,
            told,
            time.monotonic() - started,
        )
        return cost, dict(made), crashed

    async def refund_bot(self, crash_after: int) -> tuple[Cost, dict[str, int], bool]:
        customer, order = await self.fresh()
        threads = local_thread_store(self.settings)
        queue = f"crash-cost-{uuid.uuid4().hex[:8]}"
        log = self.data_dir / f"{queue}.log"
        worker_dir = self.settings.data_dir
        worker = await refund_bot_worker(self.address, queue, worker_dir, log)
        workers = [worker]
        crashed = False
        try:
            await wait_polling(self.client, queue, [worker], log)
            conv = LocalConversation(self.client, threads, queue, customer=customer)
            started = time.monotonic()
            handle = await conv.open(f"please refund order {order.order_number}")
            customer_side = Customer(threads, conv.thread_id, conv.reply)
            try:
                if crash_after:
                    steps = 0
                    events = history_as_written(handle).__aiter__()
                    while steps < crash_after:
                        event = await asyncio.wait_for(anext(events), TIMEOUT)
                        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
                            break
                        steps += event.event_type in STEP_EVENTS
                    else:
                        worker.send_signal(signal.SIGKILL)
                        crashed = True
                        workers.append(
                            await refund_bot_worker(self.address, queue, worker_dir, log)
                        )
                outcome = await asyncio.wait_for(handle.result(), TIMEOUT)
            finally:
                await customer_side.stop()
            seconds = time.monotonic() - started
        finally:
            for proc in workers:
                await terminate(proc, grace=10)
        assert outcome.status == "refunded", outcome
        # Each decide call logs "MODEL REASONING" with its Workflow ID (the SDK's activity logger).
        decides = sum(
            1
            for line in log.read_text(errors="replace").splitlines()
            if "MODEL REASONING" in line and handle.id in line
        )
        twice, told = await _thread_facts(threads, conv.thread_id)
        refunds, refund_calls = await _refunds(self.settings, order)
        made = {"decide_next_step": decides, "issue_refund": refund_calls}
        return Cost(twice, decides, refund_calls, refunds, told, seconds), made, crashed


def _extra(cost: Cost, base: Cost) -> Cost:
    return Cost(
        cost.questions_twice,
        cost.decides_twice - base.decides_twice,
        cost.refund_calls_twice - base.refund_calls_twice,
        cost.refunds_twice - base.refunds_twice,
        cost.told,
        cost.seconds,
    )


async def main(max_steps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        settings = with_test_keys(AgentSettings(_env_file=None, data_dir=data_dir / "agent"))
        await prepare_stores(settings)
        async with embedded_server(data_dir / "temporal") as server:
            client = await Client.connect(server.address, data_converter=TEST_CONVERTER)
            harness = Harness(server.address, client, settings, data_dir)
            sides = {"plain loop": harness.plain, "refund-bot": harness.refund_bot}
            base = {name: (await run(0))[0] for name, run in sides.items()}
            for name, cost in base.items():
                print(
                    f"  no crash, {name}: {cost.decides_twice} decide calls, "
                    f"{cost.refund_calls_twice} refund call, told: {cost.told[:70]!r}"
                )
            totals = {name: Cost(0, 0, 0, 0, "", 0.0) for name in sides}
            seconds: dict[str, list[float]] = {name: [] for name in sides}
            crashes = 0
            print(
                "SIGKILL after step K (extra over a run with no crash): questions posted "
                "twice, decide calls, refund calls, refunds; what the customer was told last"
            )
            for k in range(1, max_steps + 1):
                results = {}
                for name, run in sides.items():
                    cost, _, crashed = await run(k)
                    results[name] = (_extra(cost, base[name]), crashed)
                if not all(crashed for _, crashed in results.values()):
                    break  # the story has fewer steps than k
                crashes += 1
                for name, (cost, _) in results.items():
                    total = totals[name]
                    total.questions_twice += cost.questions_twice
                    total.decides_twice += cost.decides_twice
                    total.refund_calls_twice += cost.refund_calls_twice
                    total.refunds_twice += cost.refunds_twice
                    seconds[name].append(cost.seconds)
                    print(
                        f"  K={k:<2} {name:<10} questions {cost.questions_twice}  decides "
                        f"{cost.decides_twice:+d}  refund calls {cost.refund_calls_twice:+d}  "
                        f"refunds {cost.refunds_twice:+d}  {cost.seconds:5.1f} s  told: "
                        f"{cost.told[:70]!r}",
                        flush=True,
                    )
    print(f"Over {crashes} crashes, one after each step:")
    for name, total in totals.items():
        print(
            f"  {name:<10} questions posted twice {total.questions_twice}, decide calls made "
            f"twice {total.decides_twice}, refund calls made twice {total.refund_calls_twice}, "
            f"refunds made twice {total.refunds_twice}; median seconds to the outcome "
            f"{statistics.median(seconds[name]):.1f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=20, help="crash after steps 1..this")
    run_benchmark(main(parser.parse_args().max_steps))

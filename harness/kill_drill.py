"""The crash drill under load: many conversations while the Worker is SIGKILLed at random.

    place_crowd -> N stories in parallel (4 kinds) | kill the Worker 0.3-2 s after it polls -> audit

The stories mix the four endings: approved by the agent alone, escalated then approved, denied by
the policy (a final-sale order), and approved by a support agent whose grant was revoked before the
click (no refund; support declines the next round). Meanwhile the Worker is killed with SIGKILL,
unannounced (the supervisor sees the death and hands over to its standby) or through the control
queue as /crash-worker does. The audit then reads the owners' records, not the agent's memory:
each Workflow's result, the ledger's refunds, each thread's posts, each Workflow's Event History.

One implementation for the test (tests/test_crash_drill.py, small) and the benchmark
(bench/random_kills.py, full size).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from agent.decoded_history import decoded_history
from agent.models import Actor, CustomerMessage
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from agent.stores.ledger import Ledger
from bot.local.thread_store import LocalMessage
from harness.codec import TEST_CONVERTER
from harness.conditions import wait_for
from harness.conversation import SUPPORT, LocalConversation
from harness.crowd import Shopper, place_crowd
from harness.stack import supervised_stack
from refund_bot.stack import Stack
from refund_bot.wiring import local_thread_store
from worker.control import request_worker_restart, worker_identity
from worker.pollers import worker_is_polling

KINDS = ("auto", "escalated", "denied", "revoked")
EXPECTED = {"auto": "refunded", "escalated": "refunded", "denied": "denied", "revoked": "declined"}
# Approves, but its grant is revoked before the click counts.
REVOKED = Actor(platform="local", user_id="revoked-approver", display_name="Rev (revoked)")
PRESENTER = Actor(platform="local", user_id="presenter")
# Per step of a story (one post or one outcome): generous, since the Worker dies meanwhile.
STEP_TIMEOUT = 90.0


@dataclass
class DrillReport:
    conversations: int
    kills: int = 0
    crash_worker_requests: int = 0
    refunds: int = 0
    seconds: float = 0.0
    wrong_outcomes: list[str] = field(default_factory=list)
    refund_mismatches: list[str] = field(default_factory=list)  # refunds != 1 (or != 0)
    repeated_posts: list[str] = field(default_factory=list)
    missing_messages: list[str] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return len(self.repeated_posts)

    @property
    def clean(self) -> bool:
        return not (
            self.wrong_outcomes
            or self.refund_mismatches
            or self.repeated_posts
            or self.missing_messages
        )


@dataclass
class _Story:
    kind: str
    shopper: Shopper
    conv: LocalConversation
    status: str | None = None


async def _post(conv: LocalConversation, kind: str | None = None) -> LocalMessage:
    """The agent's next post in the thread (of `kind`, skipping others)."""
    deadline = time.monotonic() + STEP_TIMEOUT
    while time.monotonic() < deadline:
        posts = await conv.bot_messages()
        while len(posts) > conv._seen_bot:
            post = posts[conv._seen_bot]
            conv._seen_bot += 1
            if kind is None or post.kind == kind:
                return post
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{conv.thread_id}: no {kind or 'post'} within {STEP_TIMEOUT:.0f} s")


async def _tell(story: _Story, writes: asyncio.Semaphore, arrives_after: float) -> None:
    await asyncio.sleep(arrives_after)  # the crowd's arrival schedule, not a wait for state
    conv = story.conv
    # The customers' side writes the terminal's thread store (one SQLite file, no busy wait): a
    # few writers at a time, or hundreds at once fail with "database is locked" in the driver.
    async with writes:
        handle = await conv.open(story.shopper.opening)
    # A final-sale order is refused at once, before any question; the others ask two.
    for answer in () if story.kind == "denied" else ("Yes", "Split seam"):
        await _post(conv)
        async with writes:
            await conv.reply(answer)
    if story.kind in ("escalated", "revoked"):
        first = await _post(conv, "escalation")
        if story.kind == "escalated":
            await conv.click("approve", SUPPORT, round=first.round)
        else:
            await conv.click("approve", REVOKED, round=first.round)  # its grant is gone by now
            second = await _post(conv, "escalation")  # "... can't approve": round 2
            await conv.click("deny", SUPPORT, round=second.round)
    outcome = await asyncio.wait_for(handle.result(), STEP_TIMEOUT)
    story.status = outcome.status


async def _polling(stack: Stack) -> int | None:
    """The active Worker's pid once Temporal lists its poller; None until then."""
    supervisor, settings = stack.supervisor, stack.temporal
    assert supervisor is not None  # supervised_stack's
    pid = supervisor.pid
    if pid is None or not supervisor.running:
        return None
    identity = worker_identity(pid)
    polls = await worker_is_polling(stack.client, settings.namespace, settings.task_queue, identity)
    return pid if polls else None


async def _kill_at_random(
    stack: Stack, rng: random.Random, report: DrillReport, max_kills: int
) -> None:
    """SIGKILL the Worker 0.3-2 s after it starts polling, again and again; one kill in four
    through the control queue (/crash-worker). Counted from the poll, not from the last kill: a
    Worker still starting up (seconds on a loaded machine) would otherwise never poll at all."""
    supervisor = stack.supervisor
    assert supervisor is not None  # supervised_stack's
    while report.kills < max_kills:
        polled = await wait_for(
            lambda: _polling(stack), timeout=STEP_TIMEOUT, what="a polling Worker"
        )
        await asyncio.sleep(rng.uniform(0.3, 2.0))
        pid = supervisor.pid
        if pid != polled or not supervisor.running:
            continue  # replaced meanwhile: its successor has not been seen polling yet
        if rng.random() < 0.25:
            report.kills += 1
            report.crash_worker_requests += 1
            with contextlib.suppress(Exception):  # a restart raced by another kill: counted anyway
                await request_worker_restart(stack.client, stack.temporal.control_task_queue)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                report.kills += 1


async def _signalled_ids(stack: Stack, workflow_id: str) -> set[str]:
    history = await stack.client.get_workflow_handle(workflow_id).fetch_history()
    plain = await decoded_history(history, TEST_CONVERTER)
    ids = set()
    for event in plain.events:
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            continue
        attrs = event.workflow_execution_signaled_event_attributes
        if attrs.signal_name == "customer_message":
            (message,) = TEST_CONVERTER.payload_converter.from_payloads(
                attrs.input.payloads, [CustomerMessage]
            )
            ids.add(message.message_id)
    return ids


async def _audit(stack: Stack, stories: list[_Story], report: DrillReport) -> None:
    ours = {story.conv.handle.id for story in stories if story.conv.handle}
    refunds = await Ledger(database_for(stack.settings)).all_refunds()
    per_workflow = Counter(r.workflow_id for r in refunds)
    # The ledger also holds the demo world's seeded refunds: not the drill's.
    report.refunds = sum(n for workflow_id, n in per_workflow.items() if workflow_id in ours)
    for story in stories:
        conv, handle = story.conv, story.conv.handle
        if handle is None:
            continue  # never opened: already a wrong outcome
        if story.status is not None and story.status != EXPECTED[story.kind]:
            report.wrong_outcomes.append(f"{handle.id} ({story.kind}): {story.status}")
        should = 1 if EXPECTED[story.kind] == "refunded" else 0
        if per_workflow[handle.id] != should:
            report.refund_mismatches.append(f"{handle.id}: {per_workflow[handle.id]} refunds")
        said = [m.text for m in await conv.bot_messages()]
        report.repeated_posts += [f"{handle.id}: {t!r}" for t, n in Counter(said).items() if n > 1]
        written = {
            m.message_id
            for m in await conv.threads.messages(conv.thread_id)
            if m.author == story.shopper.actor.user_id
        }
        if missing := written - await _signalled_ids(stack, handle.id):
            report.missing_messages.append(f"{handle.id}: {sorted(missing)}")


async def run_drill(
    env: WorkflowEnvironment,
    data_dir: Path,
    conversations: int,
    *,
    max_kills: int = 10**9,
    seed: int | None = None,
    workers: int = 1,
    arrivals: float = 0.0,
) -> DrillReport:
    """`conversations` stories (the four kinds in turn) while the Worker is killed at random,
    at most `max_kills` times; the owners' records audited afterwards. `workers`: Worker
    processes polling at once; each kill takes the supervisor's first. `arrivals`: the stories
    begin evenly over this many seconds (0: all at once), so that a small crowd is still talking
    when the later kills come, on a machine fast enough to finish it in a second."""
    rng = random.Random(seed)
    report = DrillReport(conversations=conversations)
    async with supervised_stack(env, data_dir, workers=workers) as stack:
        settings = stack.settings
        per_kind = {
            kind: sum(1 for i in range(conversations) if KINDS[i % 4] == kind) for kind in KINDS
        }
        crowds = {
            "auto": await place_crowd(
                settings, per_kind["auto"], prefix="auto", first_order=500000
            ),
            "escalated": await place_crowd(
                settings,
                per_kind["escalated"],
                prefix="big",
                first_order=600000,
                amount_cents=15000,
            ),
            "denied": await place_crowd(
                settings, per_kind["denied"], prefix="final", first_order=700000, final_sale=True
            ),
            "revoked": await place_crowd(
                settings, per_kind["revoked"], prefix="rev", first_order=800000, amount_cents=15000
            ),
        }
        grants = GrantStore(database_for(settings))
        await grants.grant(REVOKED, "refund_approver", 100000, by=PRESENTER)
        await grants.revoke(REVOKED, "refund_approver", by=PRESENTER)  # approves without a grant
        threads = local_thread_store(settings)
        queue = stack.temporal.task_queue
        stories = [
            _Story(
                kind,
                shopper,
                LocalConversation(
                    threads=threads, client=stack.client, task_queue=queue, customer=shopper.actor
                ),
            )
            for kind in KINDS
            for shopper in crowds[kind]
        ]
        started = time.monotonic()
        killer = asyncio.create_task(_kill_at_random(stack, rng, report, max_kills))
        try:
            writes = asyncio.Semaphore(10)
            spacing = arrivals / max(1, len(stories))
            results = await asyncio.gather(
                *(_tell(s, writes, i * spacing) for i, s in enumerate(stories)),
                return_exceptions=True,
            )
        finally:
            killer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await killer
        report.seconds = time.monotonic() - started
        for story, result in zip(stories, results, strict=True):
            if isinstance(result, BaseException):
                report.wrong_outcomes.append(
                    f"{story.kind} {story.shopper.order_number}: {result!r}"
                )
        await _audit(stack, stories, report)
    return report

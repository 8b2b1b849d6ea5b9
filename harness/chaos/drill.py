"""The chaos drill: conversations of every kind while random faults hit every component.

    build the deployment (harness/chaos/deployment.py) -> the crowd's orders, the grants
    -> the revoked stories opened under the hold -> the schedule, printed
    -> the fault phase: faults at their times (faults.py) | the stories (stories.py)
    -> the inbox drained -> the audit from the owners (audit.py) -> every process stopped
    -> none left behind (/proc) -> ChaosReport: faults by kind, conversations, time, violations

One implementation for the benchmark (bench/chaos.py: minutes, on either backend) and the test
(tests/test_chaos.py: ChaosConfig.small, about a minute).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from agent.models import Actor
from agent.sayings import WAITING
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from bot.hold import HoldSwitch
from bot.inbox import Inbox
from harness.chaos import audit as auditing
from harness.chaos.deployment import ADMIN, CHANNEL, Backend, Deployment, deployed
from harness.chaos.edge import SlackEdge
from harness.chaos.faults import (
    OUTAGES,
    Faults,
    Timings,
    fault_kinds,
    phase_seconds,
    schedule,
)
from harness.chaos.stories import KINDS, SUPPORT, Customers, Story, bot_posts
from harness.conditions import wait_for
from harness.crowd import place_crowd

# What each kind's order is: (amount in cents, final sale).
ORDERS = {
    "auto": (2500, False),
    "escalated": (15000, False),
    "revoked": (15000, False),
    "denied": (2500, True),
    "down": (2500, False),
}


@dataclass(frozen=True)
class ChaosConfig:
    backend: Backend = "sqlite"
    conversations: int = 60
    seconds: float = 600.0  # the fault phase; at least four outages long
    seed: int = 1
    outage_seconds: float = 120.0
    quick_retry: float = 30.0  # REFUND_QUICK_RETRY (the product's default)
    gap: tuple[float, float] = (5.0, 20.0)  # between random faults
    pause: tuple[float, float] = (2.0, 8.0)  # a SIGSTOP's length
    down: tuple[float, float] = (3.0, 10.0)  # Temporal killed, PostgreSQL restarted: until back
    think: tuple[float, float] = (1.0, 6.0)  # a person's pause before each message or click
    restart_after: float = 2.0  # the service manager's (the systemd units' RestartSec=2)
    step_timeout: float | None = None  # how long a person waits for the agent's next step

    @classmethod
    def quick(cls, backend: Backend, seed: int = 1) -> ChaosConfig:
        """A few conversations and faults, for a laptop: about four minutes."""
        return cls(
            backend=backend,
            conversations=15,
            seconds=150.0,
            seed=seed,
            outage_seconds=30.0,
            quick_retry=5.0,
            gap=(4.0, 10.0),
            pause=(1.0, 4.0),
            down=(2.0, 5.0),
            think=(0.5, 3.0),
        )

    @classmethod
    def small(cls, backend: Backend, seed: int = 1) -> ChaosConfig:
        """The test suite's: every fault kind once or so in about half a minute."""
        return cls(
            backend=backend,
            conversations=10,
            seconds=24.0,
            seed=seed,
            outage_seconds=5.0,
            quick_retry=2.0,
            gap=(1.2, 2.2),
            pause=(0.8, 1.6),
            down=(1.0, 2.0),
            think=(0.1, 0.5),
            restart_after=1.0,
            step_timeout=90.0,
        )

    @property
    def phase(self) -> float:
        return phase_seconds(self.seconds, self.outage_seconds)

    @property
    def patience(self) -> float:
        return self.step_timeout or max(180.0, 2 * self.outage_seconds + 120.0)

    def line(self) -> str:
        return (
            f"{self.backend}, seed {self.seed}, {self.conversations} conversations, fault phase "
            f"{self.phase:.0f} s, outages {self.outage_seconds:g} s, REFUND_QUICK_RETRY="
            f"{self.quick_retry:g}s"
        )


@dataclass
class ChaosReport:
    config: ChaosConfig
    seconds: float = 0.0  # the whole drill, from the first process started to the last stopped
    phase_seconds: float = 0.0  # from the first fault to the last story's end
    faults: list[str] = field(default_factory=list)  # one line each, as they happened
    survived: Counter[str] = field(default_factory=Counter)  # faults applied, by kind
    skipped: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    conversations: int = 0
    messages: int = 0
    messages_while_down: int = 0
    messages_rewritten: int = 0  # told NOT_KEPT, written again
    clicks: int = 0
    clicks_repeated: int = 0
    deliveries_retried: int = 0  # POSTs to a bot that got no 200 (killed, paused, slow)
    refunds: int = 0
    refund_calls: int = 0
    waiting_by_outage: list[str] = field(default_factory=list)
    process_starts: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.violations

    def lines(self) -> list[str]:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.survived.items()))
        outcomes = ", ".join(f"{k} {n}" for k, n in sorted(self.outcomes.items()))
        starts = ", ".join(f"{k} {n}" for k, n in self.process_starts.items())
        lines = [
            f"faults survived: {sum(self.survived.values())} ({kinds})",
            f"conversations: {self.conversations} ({outcomes}); fault phase and stories "
            f"{self.phase_seconds:.0f} s, whole drill {self.seconds:.0f} s",
            f"customer messages acknowledged: {self.messages} ({self.messages_while_down} while "
            f"Temporal was down, {self.messages_rewritten} written again after "
            f"'could not pass that message on'); clicks {self.clicks} ({self.clicks_repeated} "
            f"clicked again); deliveries Slack had to retry: {self.deliveries_retried}",
            f"refunds: {self.refunds} at the ledger ({self.refund_calls} calls)",
            f"process starts: {starts}",
            *self.waiting_by_outage,
            *(f"skipped: {line}" for line in self.skipped),
            f"violations: {len(self.violations)}",
            *(f"  VIOLATION {line}" for line in self.violations),
        ]
        return lines


def _stories(config: ChaosConfig, rng: random.Random) -> list[tuple[str, int, float]]:
    """(kind, index within its kind, arrival) for every conversation: the kinds in turn, arriving
    evenly over the first three quarters of the phase; the down stories at random in its first
    half, to wait for Temporal to be down."""
    spread = config.phase * 0.75
    planned = []
    counts: Counter[str] = Counter()
    for i in range(config.conversations):
        kind = KINDS[i % len(KINDS)]
        arrival = i * spread / max(1, config.conversations) + rng.uniform(0, 1)
        if kind == "down":
            arrival = rng.uniform(0, config.phase / 2)
        planned.append((kind, counts[kind], round(arrival, 1)))
        counts[kind] += 1
    return planned


async def run_chaos(config: ChaosConfig, say: Callable[[str], None] = print) -> ChaosReport:
    rng = random.Random(config.seed)
    report = ChaosReport(config)
    started = time.monotonic()
    say(f"chaos drill: {config.line()}")
    root: Path | None = None
    try:
        async with (
            deployed(
                config.backend, quick_retry=config.quick_retry, restart_after=config.restart_after
            ) as deployment,
            aiohttp.ClientSession() as http,
        ):
            root = deployment.root
            try:
                await _drill(config, deployment, http, rng, report, say)
            except Exception as err:  # the drill's own failure: said, with everything stopped
                (root / "drill-error.txt").write_text(traceback.format_exc())
                report.violations.append(
                    f"the drill itself failed: {err!r} (traceback in {root}/drill-error.txt)"
                )
    finally:
        if root is not None:
            report.process_starts = dict(deployment.starts)
            report.violations += deployment.problems
            if report.clean:
                shutil.rmtree(root, ignore_errors=True)
            else:
                say(f"logs kept in {root}")
        report.seconds = time.monotonic() - started
    return report


async def _drill(
    config: ChaosConfig,
    deployment: Deployment,
    http: aiohttp.ClientSession,
    rng: random.Random,
    report: ChaosReport,
    say: Callable[[str], None],
) -> None:
    settings = deployment.settings
    plan = _stories(config, rng)
    shoppers = {}
    for number, kind in enumerate(KINDS):
        count = sum(1 for k, _, _ in plan if k == kind)
        amount, final_sale = ORDERS[kind]
        shoppers[kind] = await place_crowd(
            settings,
            count,
            prefix=f"U0{kind.upper()}",
            first_order=100000 * (number + 1),
            amount_cents=amount,
            final_sale=final_sale,
            platform="slack",
        )
    grants = GrantStore(database_for(settings))
    admin = Actor(platform="slack", user_id=ADMIN)
    await grants.grant(
        Actor(platform="slack", user_id=SUPPORT[0], display_name=SUPPORT[1]),
        "refund_approver",
        100000,
        by=admin,
    )
    stories = []
    for kind, index, arrival in plan:
        approver = None
        if kind == "revoked":
            approver = (f"U0REV{index}", f"rev{index}")
            await grants.grant(
                Actor(platform="slack", user_id=approver[0], display_name=approver[1]),
                "refund_approver",
                100000,
                by=admin,
            )
        stories.append(Story(kind, index, shoppers[kind][index], arrival, approver))

    starting = time.monotonic()
    await deployment.start()
    processes = ", ".join(s.name for s in deployment.services)
    database = ", PostgreSQL" if deployment.postgres else ""
    say(
        f"deployment ready after {time.monotonic() - starting:.0f} s: {processes}, Temporal at "
        f"{deployment.temporal.address}{database}"
    )

    edge = SlackEdge(deployment.bots, http, random.Random(config.seed + 1), deployment.slack)
    faults = Faults(deployment, random.Random(config.seed + 2), say)
    customers = Customers(
        deployment,
        edge,
        random.Random(config.seed + 3),
        config.think,
        config.patience,
        faults,
        say,
    )
    # The revoked stories open while the demo hold is on (/refund-hold), so that their refund
    # waits for /refund-release: the approver's grant is revoked in between.
    hold = HoldSwitch(database_for(settings), False)
    revoked = [s for s in stories if s.kind == "revoked"]
    if revoked:
        await hold.set(True)
        try:
            await asyncio.gather(*(customers.open_held(s) for s in revoked))
        finally:
            await hold.set(False)

    timings = Timings(config.gap, config.pause, config.down, config.outage_seconds)
    faults_planned = schedule(config.backend, config.phase, timings, random.Random(config.seed))
    say(f"schedule ({len(faults_planned)} faults over {config.phase:.0f} s):")
    for fault in faults_planned:
        say(f"  {fault}")
    kinds = Counter(kind for kind, _, _ in plan)
    say(f"conversations: {', '.join(f'{k} {n}' for k, n in kinds.items())}")

    phase_start = time.monotonic()
    customers.phase_started = phase_start
    customers.phase_ends = phase_start + config.phase
    customers.database_outages = [
        phase_start + f.at for f in faults_planned if f.kind == "database_outage"
    ]
    fault_task = asyncio.create_task(faults.run(faults_planned))
    try:
        await asyncio.gather(*(customers.tell(s) for s in stories))
        await fault_task
    finally:
        if not fault_task.done():
            fault_task.cancel()
        await asyncio.gather(fault_task, return_exceptions=True)
        faults.restore()
    report.phase_seconds = time.monotonic() - phase_start
    say(f"fault phase and stories over after {report.phase_seconds:.0f} s; auditing")

    # Whatever the inbox still holds gets its chance: it retries with backoff up to 30 s.
    with contextlib.suppress(AssertionError):
        await _drained(deployment)
    result = await auditing.audit(deployment, stories, _spans(faults), config.quick_retry)
    assert deployment.client is not None
    for workflow_id in await auditing.running_conversations(deployment.client):
        if workflow_id not in {s.workflow_id for s in stories}:
            result.violate(f"a conversation nobody opened is running: {workflow_id}")

    report.violations += result.violations
    report.outcomes = result.outcomes
    report.conversations = len(stories)
    report.refunds, report.refund_calls = result.refunds, result.refund_calls
    report.messages = sum(len(s.messages) for s in stories)
    report.messages_while_down = sum(len(s.while_down) for s in stories)
    report.messages_rewritten = sum(len(s.not_kept) for s in stories)
    report.clicks = sum(len(s.clicks) for s in stories)
    report.clicks_repeated = sum(s.clicks_repeated for s in stories)
    report.deliveries_retried = edge.failed_attempts
    for record in faults.records:
        report.faults.append(record.line())
        if record.done:
            report.survived[record.fault.kind] += 1
        else:
            report.skipped.append(record.line())
            if record.error:
                report.violations.append(f"fault {record.line()}")
    for kind in (*fault_kinds(config.backend), *OUTAGES):
        if not report.survived[kind]:
            report.violations.append(f"no {kind} fault was applied")
    report.waiting_by_outage = _waiting_by_outage(deployment, stories, faults, phase_start)
    if report.violations:
        _write_journals(deployment, stories, report)


def _write_journals(deployment: Deployment, stories: list[Story], report: ChaosReport) -> None:
    """stories.txt beside the logs: what each person with a violation did and saw, and their
    thread as Slack holds it."""
    lines = [*report.faults, ""]
    for story in stories:
        if not any(line.startswith(story.label) for line in report.violations):
            continue
        lines += [f"== {story.label}: {story.workflow_id}", *story.journal, "-- the thread:"]
        for thread in [*story.abandoned, *([story.thread] if story.thread else [])]:
            for message in deployment.slack.thread(CHANNEL, thread):
                who = "bot" if message.get("bot_id") else message.get("user")
                lines.append(f"   {message['ts']} {who}: {str(message.get('text'))[:100]}")
        lines.append("")
    (deployment.root / "stories.txt").write_text("\n".join(lines))


def _spans(faults: Faults) -> list[auditing.FaultSpan]:
    base = faults.started_at
    return [
        auditing.FaultSpan(base + r.started, base + r.ended, r.line())
        for r in faults.records
        if r.started is not None and r.ended is not None
    ]


async def _drained(deployment: Deployment) -> None:
    inbox = Inbox(database_for(deployment.settings))

    async def empty() -> bool:
        with contextlib.suppress(Exception):
            return (await inbox.depth()).waiting == 0
        return False

    await wait_for(empty, timeout=60, interval=0.5, what="the inbox to drain")


def _waiting_by_outage(
    deployment: Deployment, stories: list[Story], faults: Faults, phase_start: float
) -> list[str]:
    """For each dependency outage: the conversations that said they wait during it (Slack's
    own outages cannot carry the notice: the post itself is what fails)."""
    wall_at_start = time.time() - (time.monotonic() - phase_start)
    lines = []
    for record in faults.records:
        if record.fault.kind not in OUTAGES or record.started is None or record.ended is None:
            continue
        start = wall_at_start + (faults.started_at - phase_start) + record.started
        end = wall_at_start + (faults.started_at - phase_start) + record.ended + 15.0
        said = sum(
            1
            for s in stories
            if s.thread
            and any(
                p.get("text") == WAITING and start <= float(p["ts"]) <= end
                for p in bot_posts(deployment, s.thread)
            )
        )
        lines.append(
            f"outage {record.fault.kind} ({record.target}, {record.seconds:g} s at "
            f"+{record.started:.0f} s): {said} conversation(s) said they wait on our side"
        )
    return lines

"""The docs page's two demos side by side, in one support channel: the story, moment by moment.

    two threads, one customer request, the same answers:
      "Without Temporal": the agent loop as a plain process (demo/plain_loop.py)
      "With Temporal":    the same loop as RefundConversation
    -> both choose "issue the refund" -> the crash: SIGKILL both processes at once
    -> PROCESS GONE | WORKER GONE + what survives (Event History, read with no Worker alive)
    -> a new plain process has no answers and asks the customer to start over | a new Worker resumes
    -> the summary, counted from the owners: the threads, the call log, Event History, the ledger

Each moment waits for its Pace: the presenter's `/refund-demo next` (demo/command.py) or a timer
(`/refund-demo auto`, and `refund-bot demo --side-by-side`, demo/terminal.py). The story is the
presenter's own show, not durable itself: if its process stops, the story stops, and its
conversation carries on in Temporal like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client

from agent.effect_owner import refunds_at_owner
from agent.history import what_survives
from agent.models import Actor, ConversationOutcome, OrderDetails, ThreadRef
from agent.settings import AgentSettings, TemporalSettings
from bot.commands import ChannelRef, RestartReport, WorkerControl
from bot.conversations import ConversationRouter, InboundMessage, Routed
from bot.ids import workflow_id_for
from bot.inbox import Inbox
from demo.parts import (
    ANSWERS,
    LOOP_STEPS,
    DemoFailed,
    held_view,
    history_counts,
    place_demo_customer,
)
from demo.plain_loop import CustomerLine
from demo.plain_process import PlainProcess
from demo.stage import Column, Frame, Stage

log = logging.getLogger(__name__)

WITHOUT = "Without Temporal"
WITH = "With Temporal"
FOLLOW_UP = "What happened to my refund?"
STEP_TIMEOUT = 60.0  # one moment's waits: a post, a question, a Worker restart
IDLE_TIMEOUT = 30 * 60.0  # a story nobody advances ends, and its plain process with it
LOOKUPS = tuple(step for step in LOOP_STEPS if step != "decide_next_step")


@dataclass(frozen=True)
class SideCounts:
    """One thread's cost of the crash, read from the owners after the story."""

    questions_twice: int  # the thread (the platform owns what was posted)
    decides_again: int  # the plain loop's call log; Event History for the Workflow
    lookups_again: int
    model_calls_again: int | None  # with the live model only
    refunds: int  # the ledger or Stripe


@dataclass(frozen=True)
class Summary:
    without: SideCounts
    durable: SideCounts

    def problems(self) -> list[str]:
        """Where the counts differ from the docs page's story (empty: the story held)."""
        found = []
        if self.without.questions_twice != len(ANSWERS):
            found.append(f"without Temporal asked {self.without.questions_twice} twice")
        if self.durable.questions_twice:
            found.append(f"with Temporal asked {self.durable.questions_twice} twice")
        if self.without.decides_again == 0:
            found.append("without Temporal ran no decide step again")
        if self.durable.decides_again or self.durable.lookups_again:
            found.append("with Temporal ran a decide step or lookup again")
        if self.durable.model_calls_again:
            found.append("with Temporal called the model again")
        if self.without.refunds != 0:
            found.append(f"without Temporal made {self.without.refunds} refunds")
        if self.durable.refunds != 1:
            found.append(f"with Temporal made {self.durable.refunds} refunds")
        return found


@dataclass
class StoryParts:
    """What a story needs from the process that runs it."""

    client: Client
    temporal: TemporalSettings
    settings: AgentSettings
    inbox: Inbox
    workers: WorkerControl
    # The plain loop's environment on top of this process's (the Worker's: platform settings).
    child_env: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Side:
    heading: str
    customer: Actor
    order: OrderDetails
    thread: ThreadRef
    conversation_id: str  # the Workflow ID, or the plain loop's id at the owners

    @property
    def opening(self) -> str:
        return f"please refund order {self.order.order_number}"


class Pace:
    """Between moments: one presenter's `next` per moment (pressed early, they queue), or after
    `auto` a timer (a `next` still moves on at once)."""

    def __init__(self, auto_delay: float, auto: bool = False) -> None:
        self.auto_delay = auto_delay
        self.auto = auto
        self._auto_from = 0.0  # when `auto` was pressed: its timer runs from then at the latest
        self._nexts = 0
        self._pressed = asyncio.Event()

    def next(self) -> None:
        self._nexts += 1
        self._pressed.set()

    def go_auto(self, delay: float | None = None) -> None:
        self.auto, self._auto_from = True, time.monotonic()
        if delay is not None:
            self.auto_delay = delay
        self._pressed.set()

    async def wait(self) -> None:
        began = time.monotonic()
        while not self._nexts:
            if self.auto:
                left = max(began, self._auto_from) + self.auto_delay - time.monotonic()
                if left <= 0:
                    return
            else:
                left = began + IDLE_TIMEOUT - time.monotonic()
                if left <= 0:
                    raise DemoFailed("nobody advanced the demo for 30 minutes")
            self._pressed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._pressed.wait(), left)
        self._nexts -= 1


class SideBySide:
    """One telling of the story in one channel."""

    def __init__(
        self,
        parts: StoryParts,
        stage: Stage,
        channel: ChannelRef,
        pace: Pace,
    ) -> None:
        self.parts = parts
        self.stage = stage
        self.channel = channel
        self.pace = pace
        self.story_id = secrets.token_hex(4)
        self.work_dir = Path(parts.settings.data_dir) / "side-by-side" / self.story_id
        self.router = ConversationRouter(
            parts.client,
            parts.temporal.task_queue,
            parts.inbox,
            self._always_hold,
            decider=parts.settings.agent_decider,
            timing=parts.settings.timing(),
        )
        self.moment = "opening the two threads"
        self.upcoming = "opening the two threads"
        self.summary: Summary | None = None
        self.without: Side | None = None
        self.durable: Side | None = None
        self._plain: PlainProcess | None = None  # the plain loop's process: its memory, its state
        self._before_crash: Counter[str] = Counter()
        self._restart: RestartReport | None = None
        self._messages = 0

    @staticmethod
    async def _always_hold() -> bool:
        return True  # the crash lands at the same point every time: one step before the refund

    # The moments, in order -------------------------------------------------------------------

    def moments(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        return [
            ("the customer writes in both threads", self._open),
            ("the agent's first question, answered in both", lambda: self._answer(0)),
            ("the agent's second question, answered in both", lambda: self._answer(1)),
            ("both choose to issue the refund", self._to_the_refund),
            ("the crash: SIGKILL both processes", self._crash),
            ("after the crash: a new process, a new Worker", self._after_crash),
            ("the Workflow resumes; the plain loop's customer starts over", self._resume),
            ("the summary, counted from the owners", self._summarise),
        ]

    async def run(self) -> Summary:
        """Every moment in turn, the pace between them; the plain process stops at the end."""
        moments = self.moments()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            for index, (name, moment) in enumerate(moments):
                self.moment = name
                self.upcoming = moments[index + 1][0] if index + 1 < len(moments) else ""
                await moment()
                if self.upcoming:
                    await self.pace.wait()
        except DemoFailed as err:
            await self._say_stopped(str(err))
            raise
        except Exception as err:
            log.exception("the side-by-side demo failed at %r", self.moment)
            await self._say_stopped("something failed on our side (the bot's log has it)")
            raise DemoFailed(str(err)) from err
        finally:
            if self._plain is not None:
                await self._plain.stop()
        assert self.summary is not None
        return self.summary

    async def _open(self) -> None:
        settings, platform = self.parts.settings, self.stage.platform
        # Two copies of the demo customer and of order 1234, one per thread: one thread's refund
        # never changes the other's story (the customer's refund history, the order's state).
        sides = []
        for heading, subtitle in (
            (WITHOUT, "the agent loop as a plain process"),
            (WITH, "the same loop as a Temporal Workflow"),
        ):
            customer, order = await place_demo_customer(settings, platform=platform)
            opening = f"please refund order {order.order_number}"
            thread, root = await self.stage.open_thread(
                self.channel, f"{heading}: {subtitle}", customer, opening
            )
            conversation_id = (
                workflow_id_for(thread) if heading == WITH else f"plain-{self.story_id}"
            )
            sides.append((Side(heading, customer, order, thread, conversation_id), root))
        (self.without, _), (self.durable, durable_root) = sides
        self._plain = await self._start_plain(self.work_dir / "calls-1")
        await self._plain.send(CustomerLine(text=self.without.opening, message_id="root"))
        await self._route(self.durable, durable_root, self.durable.opening, opens=True)

    async def _answer(self, index: int) -> None:
        without, durable, plain = self._sides()
        await plain.expect("asked")
        await self._wait_questions(durable, index + 1)
        answer = ANSWERS[index]
        message_id = await self.stage.post_line(without.thread, without.customer, answer)
        await plain.send(CustomerLine(text=answer, message_id=message_id))
        message_id = await self.stage.post_line(durable.thread, durable.customer, answer)
        await self._route(durable, message_id, answer)

    async def _to_the_refund(self) -> None:
        _, durable, plain = self._sides()
        await plain.expect("next_refund")
        await held_view(self.parts.client, durable.conversation_id, STEP_TIMEOUT)
        self._before_crash = await history_counts(self.parts.client, durable.conversation_id)

    async def _crash(self) -> None:
        without, durable, plain = self._sides()

        async def while_no_worker() -> None:
            # The Worker is dead (the restart killed it a moment ago); the plain process now.
            await plain.kill()
            await self.stage.post_frame(
                without.thread,
                Frame(
                    "PROCESS GONE",
                    (
                        f"The agent's process (pid {plain.pid}) was SIGKILLed one step before "
                        "the refund.",
                        "Its answers, its lookups and its next step lived in that process's "
                        "memory: they are gone with it.",
                    ),
                    tone="gone",
                ),
            )
            await self.stage.post_frame(
                durable.thread,
                Frame(
                    "WORKER GONE",
                    (
                        "The Worker was SIGKILLed at the same moment, one step before the refund.",
                        "Its in-memory loop is gone; Temporal still has the saved loop.",
                    ),
                    tone="gone",
                ),
            )
            await self.stage.post_frame(durable.thread, await self._what_survives(durable))

        self._restart = await asyncio.wait_for(
            self.parts.workers.restart(None, while_down=while_no_worker), STEP_TIMEOUT
        )
        log.info(
            "side-by-side %s: Worker pid %s and plain loop pid %s SIGKILLed",
            self.story_id, self._restart.old_pid, plain.pid,
        )  # fmt: skip

    async def _what_survives(self, durable: Side) -> Frame:
        survivors = await what_survives(self.parts.client, durable.conversation_id)
        owner = await refunds_at_owner(
            self.parts.settings, durable.conversation_id, durable.order.payment_ref
        )
        answers = "; ".join(f"{q} {a}" for q, a in survivors.answers.items())
        return Frame(
            "WHAT SURVIVES",
            (
                "Read from Temporal's Event History just now, with no Worker alive:",
                f"customer answers: {len(survivors.answers)} ({answers})",
                f"completed lookups: {len(survivors.lookups)} ({', '.join(survivors.lookups)})",
                f"next action: {survivors.next_action}",
                f"{owner.owner}: payment {durable.order.payment_ref} paid, refund "
                + ("; ".join(owner.refunds) or "none"),
            ),
            tone="survives",
        )

    async def _after_crash(self) -> None:
        without, durable, _ = self._sides()
        restart = self._restart
        assert restart is not None
        self._plain = await self._start_plain(self.work_dir / "calls-2")
        message_id = await self.stage.post_line(without.thread, without.customer, FOLLOW_UP)
        await self._plain.send(CustomerLine(text=FOLLOW_UP, message_id=message_id))
        await self._plain.expect("start_over")
        await self.stage.post_frame(
            durable.thread,
            Frame(
                "A NEW WORKER",
                (
                    f"Worker pid {restart.new_pid} on {restart.host} took over from pid "
                    f"{restart.old_pid} in {restart.seconds_to_ready - restart.seconds_paused:.2f}"
                    f" s, once the story had read what survives ({restart.seconds_paused:.2f} s"
                    " with no Worker).",
                    "The same loop, rebuilt from Event History: it waits where it stood, one "
                    "step before the refund.",
                ),
            ),
        )

    async def _resume(self) -> None:
        without, durable, plain = self._sides()
        handle = self.parts.client.get_workflow_handle(
            durable.conversation_id, result_type=ConversationOutcome
        )
        await handle.signal("release")
        outcome = await asyncio.wait_for(handle.result(), STEP_TIMEOUT)
        after = await history_counts(self.parts.client, durable.conversation_id)
        again = {step: after[step] - self._before_crash[step] for step in LOOP_STEPS}
        asked = await self.stage.questions(durable.thread)
        await self.stage.post_frame(
            durable.thread,
            Frame(
                "NO REPEATED QUESTIONS · NO LOOP RESTART",
                (
                    f"Questions asked: {len(asked)}, each once.",
                    f"Decide steps run again after the crash: {again['decide_next_step']}; "
                    f"lookups run again: {sum(again[s] for s in LOOKUPS)}.",
                    f"The outcome: {outcome.status}.",
                ),
                tone="good",
            ),
        )
        # The plain loop's customer does what they were told: starts the return again.
        message_id = await self.stage.post_line(without.thread, without.customer, without.opening)
        await plain.send(CustomerLine(text=without.opening, message_id=message_id))
        for answer in ANSWERS:
            await plain.expect("asked")
            message_id = await self.stage.post_line(without.thread, without.customer, answer)
            await plain.send(CustomerLine(text=answer, message_id=message_id))
        await plain.expect("next_refund")
        await self.stage.post_frame(
            without.thread,
            Frame(
                "THE CUSTOMER STARTS OVER",
                (
                    f"The same {len(ANSWERS)} questions, asked again; every decide step and "
                    "lookup, run again.",
                    "Back where it stood before the crash, one step before the refund, and no "
                    "refund made.",
                ),
                tone="gone",
            ),
        )

    async def _summarise(self) -> None:
        without, durable, _ = self._sides()
        summary = Summary(await self._count_without(without), await self._count_durable(durable))
        self.summary = summary
        model = self.parts.settings.agent_decider == "openai"

        def column(heading: str, counts: SideCounts) -> Column:
            lines = [
                f"questions asked twice: {counts.questions_twice}",
                f"decide steps run again: {counts.decides_again}",
                f"lookups run again: {counts.lookups_again}",
            ]
            if model:
                lines.append(f"model calls made again: {counts.model_calls_again}")
            lines.append(f"refunds made: {counts.refunds}")
            return Column(heading, tuple(lines))

        problems = summary.problems()
        await self.stage.post_frame(
            self.channel,
            Frame(
                "SAME CRASH, TWO OUTCOMES",
                (
                    "Counted from the owners: the threads, the plain loop's call log, Event "
                    "History, the " + ("ledger." if self.parts.settings.stripe_api_key is None
                                       else "Stripe test-mode refunds."),
                    "ok: every count is the docs page's." if not problems
                    else "Not the docs page's story: " + "; ".join(problems) + ".",
                ),
                columns=(column(WITHOUT, summary.without), column(WITH, summary.durable)),
                tone="good" if not problems else "gone",
            ),
        )  # fmt: skip

    # Counting, from the owners -----------------------------------------------------------------

    async def _count_without(self, side: Side) -> SideCounts:
        # Everything the plain loop's second process did redid work the first had done.
        return await self._counts(side, Counter((self.work_dir / "calls-2").read_text().split()))

    async def _count_durable(self, side: Side) -> SideCounts:
        after = await history_counts(self.parts.client, side.conversation_id)
        again = Counter({step: after[step] - self._before_crash[step] for step in LOOP_STEPS})
        # Every model call is a decide step: none run again means no model call made again.
        again["model_call"] = again["decide_next_step"]
        return await self._counts(side, again)

    async def _counts(self, side: Side, again: Counter[str]) -> SideCounts:
        """One side's counts: `again`, the steps run again after the crash (by step name)."""
        owner = await refunds_at_owner(
            self.parts.settings, side.conversation_id, side.order.payment_ref
        )
        model = self.parts.settings.agent_decider == "openai"
        return SideCounts(
            questions_twice=_asked_twice(await self.stage.questions(side.thread)),
            decides_again=again["decide_next_step"],
            lookups_again=sum(again[s] for s in LOOKUPS),
            model_calls_again=again["model_call"] if model else None,
            refunds=len(owner.refunds),
        )

    # Plumbing ----------------------------------------------------------------------------------

    def _sides(self) -> tuple[Side, Side, PlainProcess]:
        assert self.without and self.durable and self._plain
        return self.without, self.durable, self._plain

    async def _start_plain(self, calls: Path) -> PlainProcess:
        side = self.without
        assert side is not None
        return await PlainProcess.start(
            self.parts.settings,
            side.thread,
            side.customer,
            side.conversation_id,
            side.order.order_number,
            calls=calls,
            log_file=self.work_dir / "plain-loop.log",
            child_env=self.parts.child_env,
        )

    async def _route(self, side: Side, message_id: str, text: str, opens: bool = False) -> None:
        self._messages += 1
        routed = await self.router.on_message(
            InboundMessage(
                event_id=f"side-by-side-{self.story_id}-{self._messages}",
                thread=side.thread,
                message_id=message_id,
                author=side.customer,
                text=text,
                opens_thread=opens,
            )
        )
        if routed not in (Routed.STARTED, Routed.SIGNALLED):
            raise DemoFailed(f"Temporal did not take the customer's message now ({routed})")

    async def _wait_questions(self, side: Side, count: int) -> None:
        deadline = time.monotonic() + STEP_TIMEOUT
        while time.monotonic() < deadline:
            if len(await self.stage.questions(side.thread)) >= count:
                return
            await asyncio.sleep(0.2)
        raise DemoFailed(f"the agent did not ask question {count} within {STEP_TIMEOUT:.0f}s")

    async def _say_stopped(self, reason: str) -> None:
        frame = Frame("THE DEMO STOPPED", (f"The demo stopped at {self.moment}: {reason}.",))
        for side in (self.without, self.durable):
            if side is not None:
                with contextlib.suppress(Exception):  # the reason is logged; the story is over
                    await self.stage.post_frame(side.thread, frame)


def _asked_twice(questions: list[str]) -> int:
    return sum(count - 1 for count in Counter(questions).values())

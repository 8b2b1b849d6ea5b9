"""The drill's conversations: customers and approvers in Slack threads, each a story of one kind.

    auto       $25: two questions answered, refunded by the agent alone
    escalated  $150: two questions, an escalation, approved by a support agent, refunded
    revoked    $150, opened while the demo hold is on: approved by a support agent whose grant is
               then revoked while the refund is held, released: no refund, a new round, declined
    denied     a final-sale order: refused at once, nothing asked
    down       $25 as auto, one message (the opening, or the first answer) written while
               Temporal is down (killed or paused), acknowledged by a bot that cannot reach it

Each person acts as a person in Slack would: they write, wait for the agent's next post, and
answer it after a moment; told "could not pass that message on" (bot.conversations.NOT_KEPT),
they write it again; a click that changed nothing (its buttons still there, or "could not be
handled") is clicked again. Nothing here reads Temporal or the stores to decide what to do next:
only the thread, as a person sees it. A step that waits longer than `step_timeout` for the agent
ends the story as stalled (the audit says where).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.models import Actor
from agent.sayings import WAITING
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from agent.workflow import RefundConversation
from bot.clicks import CLICK_FAILED
from bot.conversations import NOT_KEPT
from bot.slack.render import APPROVE_ACTION_ID, DENY_ACTION_ID, metadata_key
from harness.chaos.deployment import ADMIN, CHANNEL, TEAM, Deployment
from harness.chaos.edge import Ack, SlackEdge
from harness.chaos.faults import Faults
from harness.crowd import Shopper
from harness.fakes.slack_api import SlackSender

KINDS = ("auto", "escalated", "revoked", "denied", "down")
EXPECTED = {
    "auto": "refunded",
    "escalated": "refunded",
    "revoked": "declined",
    "denied": "denied",
    "down": "refunded",
}
SUPPORT = ("U0SAM", "sam")  # a support agent with a live refund_approver grant throughout


class Stalled(Exception):
    """The agent did not take the story's next step in time."""


@dataclass
class Story:
    kind: str
    index: int
    shopper: Shopper
    arrives: float  # seconds into the fault phase
    approver: tuple[str, str] | None = None  # revoked: theirs, revoked while the refund is held
    thread: str | None = None  # the conversation's thread (its root message's ts)
    abandoned: list[str] = field(default_factory=list)  # openings answered NOT_KEPT, rewritten
    messages: list[Ack] = field(default_factory=list)  # the customer's acknowledged messages
    not_kept: list[Ack] = field(default_factory=list)  # ... of those, the ones told NOT_KEPT
    while_down: list[Ack] = field(default_factory=list)  # ... written while Temporal was down
    clicks: list[Ack] = field(default_factory=list)
    clicks_repeated: int = 0
    # Seconds of the database outage left when this story took its step into it (escalated:
    # the approval; revoked: the release), if it did.
    outage_left: float | None = None
    journal: list[str] = field(default_factory=list)  # what the person did and saw, timed
    stage: str = "not started"
    started: float | None = None  # time.monotonic()
    ended: float | None = None
    stalled: str | None = None

    @property
    def workflow_id(self) -> str | None:
        return f"slack-{TEAM}-{CHANNEL}-{self.thread}" if self.thread else None

    @property
    def label(self) -> str:
        return f"{self.kind} #{self.index} (order {self.shopper.order_number})"

    def note(self, since: float, line: str) -> None:
        self.journal.append(f"+{time.monotonic() - since:7.1f}s {line}")


def bot_posts(deployment: Deployment, thread: str) -> list[dict[str, Any]]:
    return [m for m in deployment.slack.thread(CHANNEL, thread) if m.get("bot_id")]


def agent_posts(deployment: Deployment, thread: str) -> list[dict[str, Any]]:
    """The conversation's own posts (they carry its message key), in thread order."""
    return [m for m in bot_posts(deployment, thread) if metadata_key(m)]


def steps(deployment: Deployment, thread: str) -> list[dict[str, Any]]:
    """The agent's posts a person answers or waits for: all but "I'm waiting on our systems"."""
    return [m for m in agent_posts(deployment, thread) if m.get("text") != WAITING]


def notices(deployment: Deployment, thread: str, text: str) -> int:
    """How many times the bot itself (not the conversation) said `text` in the thread."""
    return sum(
        1 for m in bot_posts(deployment, thread) if not metadata_key(m) and m.get("text") == text
    )


@dataclass
class Customers:
    deployment: Deployment
    edge: SlackEdge
    rng: random.Random
    think: tuple[float, float]
    step_timeout: float
    faults: Faults
    say: Callable[[str], None]
    phase_started: float = 0.0
    phase_ends: float = 0.0
    database_outages: list[float] = field(default_factory=list)  # planned starts (monotonic)

    @property
    def sender(self) -> SlackSender:
        return SlackSender(self.deployment.slack)

    async def _pause(self) -> None:
        await asyncio.sleep(self.rng.uniform(*self.think))  # a person reads, then types

    async def _again(self, times: int) -> None:
        """Told "please send it again in a moment" `times` times in a row: a person waits a
        little longer each time (up to half a minute) before writing it again."""
        await asyncio.sleep(min(30.0, self.rng.uniform(*self.think) * 2 ** (times - 1)))

    # -- the story -------------------------------------------------------------------------------

    async def open_held(self, story: Story) -> None:
        """A revoked story's opening, written while the hold is on (before the fault phase)."""
        story.started = time.monotonic()
        await self._open(story)

    async def tell(self, story: Story) -> None:
        await asyncio.sleep(max(0.0, self.phase_started + story.arrives - time.monotonic()))
        try:
            await self._tell(story)
        except Stalled as stalled:
            story.stalled = str(stalled)
        except Exception as err:  # the thread held something this story did not expect
            story.stalled = f"{story.stage}: {type(err).__name__}: {err}"
        finally:
            story.ended = time.monotonic()
            if story.stalled:
                self.say(f"  story {story.label} did not finish: {story.stalled}")

    async def _tell(self, story: Story) -> None:
        if story.kind != "revoked":
            story.started = time.monotonic()
            if story.kind == "down" and story.index % 2 == 0:
                await self._until_temporal_down(story)
            await self._open(story)
        if story.kind == "denied":
            story.stage = "ended"
            return
        await self._pause()
        if story.kind == "down" and story.index % 2 == 1:
            await self._until_temporal_down(story)
        story.stage = "answering the first question"
        await self._write(story, "Yes", seen=1)
        await self._pause()
        story.stage = "answering the second question"
        decided = await self._write(story, "Split seam", seen=2)
        if story.kind == "escalated":
            await self._pause()
            await self._into_database_outage(story)
            story.stage = "approving"
            await self._click(story, decided, APPROVE_ACTION_ID, SUPPORT, seen=3)
        elif story.kind == "revoked":
            assert story.approver is not None
            await self._pause()
            story.stage = "approving (grant to be revoked)"
            await self._click(story, decided, APPROVE_ACTION_ID, story.approver, seen=3)
            story.stage = "held: revoking the approver's grant"
            await self._revoke(story.approver)
            story.note(self.phase_started, "approver's grant revoked")
            await self._into_database_outage(story)
            story.stage = "held: releasing"
            await self._release(story)
            story.note(self.phase_started, "released")
            story.stage = "waiting for the new escalation round"
            again = await self._next(story, seen=4)
            await self._pause()
            story.stage = "denying"
            await self._click(story, again, DENY_ACTION_ID, SUPPORT, seen=5)
        story.stage = "ended"

    async def _until_temporal_down(self, story: Story) -> None:
        """Until Temporal is down (killed or paused), or the fault phase ends without that."""
        story.stage = "waiting for Temporal to be down"
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                self.faults.temporal_down.wait(), max(0.0, self.phase_ends - time.monotonic())
            )

    async def _into_database_outage(self, story: Story) -> None:
        """An approver who clicks, or an admin who releases, once the database outage ahead has
        begun: so that conversations take these steps while it holds. None ahead: at once."""
        now = time.monotonic()
        ahead = [start for start in self.database_outages if start > now]
        if ahead and not self.faults.database_out.is_set():
            story.stage = f"{story.stage}, waiting for the database outage"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.faults.database_out.wait(), ahead[0] - now + 30.0)
        if self.faults.database_out.is_set():
            story.outage_left = self.faults.database_back_at - time.monotonic()
            story.note(
                self.phase_started, f"into the database outage, {story.outage_left:.1f}s left"
            )

    # -- writing ---------------------------------------------------------------------------------

    async def _open(self, story: Story) -> None:
        """The opening message, written again (a new thread) each time the bot says it could
        not pass it on; returns once the agent has posted its first step in the thread."""
        user, name = story.shopper.actor.user_id, story.shopper.actor.display_name or ""
        times = 0
        while True:
            story.stage = "opening"
            delivery = self.sender.post(CHANNEL, story.shopper.opening, user=user, name=name)
            ts = delivery.payload["event"]["ts"]
            if story.thread is not None:
                story.abandoned.append(story.thread)
            story.thread = ts
            ack = await self._deliver(story, delivery)
            if await self._answered(story, ack, seen=0) is not None:
                return
            times += 1
            await self._again(times)

    async def _write(self, story: Story, text: str, *, seen: int) -> dict[str, Any]:
        """A reply in the thread (again, if told NOT_KEPT); the agent's next step after it."""
        assert story.thread is not None
        user, name = story.shopper.actor.user_id, story.shopper.actor.display_name or ""
        times = 0
        while True:
            delivery = self.sender.post(CHANNEL, text, user=user, name=name, thread_ts=story.thread)
            ack = await self._deliver(story, delivery)
            post = await self._answered(story, ack, seen=seen)
            if post is not None:
                return post
            times += 1
            await self._again(times)

    async def _deliver(self, story: Story, delivery: Any) -> Ack:
        down = self.faults.temporal_down.is_set()
        event = delivery.payload["event"]
        ack = await self.edge.deliver(
            delivery,
            kind="message",
            key=delivery.payload["event_id"],
            message_ts=event["ts"],
            thread=event.get("thread_ts") or event["ts"],
            user=event["user"],
        )
        story.messages.append(ack)
        if down and self.faults.temporal_down.is_set():
            story.while_down.append(ack)
        story.note(
            self.phase_started,
            f"wrote {event.get('text')!r} ({event['ts']}, {delivery.payload['event_id']}): "
            f"HTTP 200 from {ack.bot} at attempt {ack.attempts}"
            + (" while Temporal was down" if ack in story.while_down else ""),
        )
        return ack

    async def _answered(self, story: Story, ack: Ack, *, seen: int) -> dict[str, Any] | None:
        """The agent's step number `seen` (0-based) once posted; None if the bot said it could
        not pass the message on (the customer then writes it again)."""
        assert story.thread is not None
        thread = story.thread
        told = sum(1 for a in story.not_kept if a.thread == thread)
        deadline = time.monotonic() + self.step_timeout
        while time.monotonic() < deadline:
            posted = steps(self.deployment, thread)
            if len(posted) > seen:
                story.note(self.phase_started, f"read {posted[seen].get('text', '')[:50]!r}")
                return posted[seen]
            if notices(self.deployment, thread, NOT_KEPT) > told:
                story.not_kept.append(ack)
                story.note(self.phase_started, f"read {NOT_KEPT!r}")
                return None
            await asyncio.sleep(0.25)
        raise Stalled(f"{story.stage}: no answer {self.step_timeout:.0f} s after the message")

    async def _next(self, story: Story, *, seen: int) -> dict[str, Any]:
        assert story.thread is not None
        deadline = time.monotonic() + self.step_timeout
        while time.monotonic() < deadline:
            posted = steps(self.deployment, story.thread)
            if len(posted) > seen:
                return posted[seen]
            await asyncio.sleep(0.25)
        raise Stalled(f"{story.stage}: nothing posted for {self.step_timeout:.0f} s")

    # -- clicking --------------------------------------------------------------------------------

    def _has_buttons(self, ts: str) -> bool:
        message = self.deployment.slack.message(CHANNEL, ts) or {}
        return any(
            element.get("action_id") in (APPROVE_ACTION_ID, DENY_ACTION_ID)
            for block in message.get("blocks") or []
            if block.get("type") == "actions"
            for element in block.get("elements") or []
        )

    def _failed_for(self, user: str, after: int, thread: str) -> bool:
        """A failure notice to `user` since `after`, in `thread` when the notice says where."""
        return any(
            e["user"] == user and e["text"] == CLICK_FAILED and e.get("thread_ts") in (None, thread)
            for e in self.deployment.slack.ephemerals[after:]
        )

    async def _click(
        self, story: Story, escalation: dict[str, Any], action: str, who: tuple[str, str], *,
        seen: int,
    ) -> dict[str, Any]:  # fmt: skip
        """Click `action` on the escalation; again if it changed nothing. The agent's next step."""
        assert story.thread is not None
        deadline = time.monotonic() + self.step_timeout
        while True:
            if not self._has_buttons(escalation["ts"]):
                return await self._next(story, seen=seen)  # decided: what follows is the agent's
            ephemerals = len(self.deployment.slack.ephemerals)
            delivery = self.sender.click(
                CHANNEL, escalation["ts"], action, user=who[0], name=who[1]
            )
            click_id = delivery.payload["actions"][0]["action_ts"]
            ack = await self.edge.deliver(
                delivery, kind="click", key=click_id, thread=story.thread, user=who[0]
            )
            story.clicks.append(ack)
            story.note(
                self.phase_started,
                f"{who[1]} clicked {action} ({click_id}): HTTP 200 from {ack.bot} at attempt "
                f"{ack.attempts}",
            )
            clicked = time.monotonic()
            while True:
                posted = steps(self.deployment, story.thread)
                if len(posted) > seen:
                    return posted[seen]
                if self._failed_for(who[0], ephemerals, story.thread):
                    story.note(self.phase_started, f"{who[1]} read {CLICK_FAILED!r}")
                    break  # "could not be handled just now": try again
                if time.monotonic() - clicked > 30 and self._has_buttons(escalation["ts"]):
                    break  # nothing happened, the buttons still there: a person clicks again
                if time.monotonic() > deadline:
                    raise Stalled(f"{story.stage}: nothing after the click for "
                                  f"{self.step_timeout:.0f} s")  # fmt: skip
                await asyncio.sleep(0.25)
            story.clicks_repeated += 1
            await self._again(story.clicks_repeated)
            # The same approver clicks in several threads: a failure notice may be another
            # thread's while this click is still being handled (its buttons gone until it fails
            # and the bot puts them back). Click again only on buttons that are there.
            while not self._has_buttons(escalation["ts"]):
                if len(steps(self.deployment, story.thread)) > seen:
                    break  # the click went through after all: the loop reads the next step
                if time.monotonic() > deadline:
                    raise Stalled(f"{story.stage}: the buttons never came back after the click")
                await asyncio.sleep(0.25)

    # -- the admin's part ------------------------------------------------------------------------

    async def _revoke(self, approver: tuple[str, str]) -> None:
        """The approver's grant revoked in the grant store (as /refund-grant revoke does)."""
        grants = GrantStore(database_for(self.deployment.settings))
        actor = Actor(platform="slack", user_id=approver[0], display_name=approver[1])
        admin = Actor(platform="slack", user_id=ADMIN)
        await _until_it_works(lambda: grants.revoke(actor, "refund_approver", by=admin))

    async def _release(self, story: Story) -> None:
        """/refund-release: the `release` Signal, retried while Temporal is away."""
        client = self.deployment.client
        assert client is not None and story.workflow_id is not None
        handle = client.get_workflow_handle(story.workflow_id)
        await _until_it_works(lambda: handle.signal(RefundConversation.release))


async def _until_it_works(call: Callable[[], Any], timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            async with asyncio.timeout(10):
                await call()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1.0)

"""The drill's invariants, read at the end from each fact's owner, one line per violation.

    Temporal (each conversation's Event History and result) | the ledger (refunds) | the grant
    store (every grant, revoked ones included) | the inbox | the Slack fake (each thread as a
    person reads it) | the edge's record of what each bot acknowledged

1. Every acknowledged customer message answered exactly once: it reached its conversation (a
   `customer_message` Signal in its history) unless the bot said in the thread that it could not
   pass it on (NOT_KEPT, the customer then wrote again), and the thread holds exactly the agent's
   steps its story calls for, each once.
2. Every conversation ended with a sentence in its thread: the run completed with the outcome its
   story calls for, and the thread's last step is that outcome's sentence.
3. No refund twice: per conversation and per order, at the ledger.
4. No refund without a live grant at the moment of the refund: the grant that allowed it (the
   `authorize_refund` result recorded right before `issue_refund`) was live, in the grant store's
   history, when the ledger made the refund.
5. No question asked twice, and no post made twice (each message key once in its thread).
6. The inbox empty: nothing waiting, no dead letter.
(7. No process left behind: harness/chaos/processes.left_behind, after everything stopped.)
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from agent.decoded_history import decoded_history
from agent.models import AuthorizationDecision, ConversationOutcome
from agent.sayings import DECLINED, WAITING
from agent.stores import grants as grants_store
from agent.stores.databases import database_for
from agent.stores.grants import Grant
from agent.stores.ledger import Ledger, LedgerRefund
from bot.conversations import NOT_KEPT, NOTICES, Routed
from bot.inbox import Inbox
from bot.slack.render import metadata_key
from harness.chaos.deployment import CHANNEL, TEAM, Deployment
from harness.chaos.stories import EXPECTED, Story, agent_posts, bot_posts, notices
from harness.codec import TEST_CONVERTER
from harness.events import customer_message, local_activity

QUESTIONS = (("question", "Was the package opened?"), ("question", "What was damaged?"))
REFUNDED = ("outcome", "Your refund is complete")
# An escalation's text is edited once decided ("Approved by …: refund issued"): its kind is checked.
ESCALATED = ("escalation", "")
# The agent's steps in a thread, by story (kind, how the text begins), "I'm waiting" aside.
SCRIPTS: dict[str, tuple[tuple[str, str], ...]] = {
    "auto": (*QUESTIONS, REFUNDED),
    "down": (*QUESTIONS, REFUNDED),
    "escalated": (*QUESTIONS, ESCALATED, REFUNDED),
    "revoked": (
        *QUESTIONS,
        ESCALATED,
        ("info", "Refund of $150.00 approved. Holding before the refund"),
        ESCALATED,  # "No refund yet: …", a new round
        ("outcome", DECLINED),
    ),
    "denied": (("outcome", "I can't refund this order. "),),
}
QUEUED = NOTICES[Routed.QUEUED]


@dataclass
class Audit:
    violations: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    refunds: int = 0
    refund_calls: int = 0  # calls the ledger took for them (retries that found the first refund)
    waiting_notices: int = 0
    queued_notices: int = 0
    not_kept_notices: int = 0

    def violate(self, line: str) -> None:
        self.violations.append(line)


async def decoded_events(client: Client, workflow_id: str) -> list[Any]:
    """A conversation's Event History, decrypted."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return list((await decoded_history(history, TEST_CONVERTER)).events)


def delivered_message_ids(events: list[Any]) -> list[str]:
    """Message ids of every customer message delivered (a customer_message Signal or an accepted
    Update), in order (repeats kept)."""
    return [
        message.message_id
        for event in events
        if (message := customer_message(event, TEST_CONVERTER)) is not None
    ]


def _last_task_failure(events: list[Any]) -> str | None:
    """The last workflow task failure's message, if the last workflow task failed."""
    for event in reversed(events):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            return str(event.workflow_task_failed_event_attributes.failure.message)[:160]
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return None
    return None


def _outcome(events: list[Any]) -> ConversationOutcome | None:
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            (outcome,) = TEST_CONVERTER.payload_converter.from_payloads(
                event.workflow_execution_completed_event_attributes.result.payloads,
                [ConversationOutcome],
            )
            return outcome
    return None


def _authorizations_before_refund(events: list[Any]) -> list[AuthorizationDecision]:
    """The authorize_refund result recorded last before each issue_refund was scheduled: a local
    try's, or, when the try failed (the grant store out), the regular Activity's that outlasted
    the outage."""
    last: AuthorizationDecision | None = None
    found = []
    regular: set[int] = set()  # the authorize_refund Activities' scheduled event ids
    for event in events:
        marker = local_activity(event)
        if marker is not None and marker.get("activity_type") == "authorize_refund":
            result = event.marker_recorded_event_attributes.details.get("result")
            if result is not None and result.payloads:  # a failed try records no result
                (last,) = TEST_CONVERTER.payload_converter.from_payloads(
                    result.payloads, [AuthorizationDecision]
                )
        elif (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_type.name
            == "authorize_refund"
        ):
            regular.add(event.event_id)
        elif (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            and event.activity_task_completed_event_attributes.scheduled_event_id in regular
        ):
            (last,) = TEST_CONVERTER.payload_converter.from_payloads(
                event.activity_task_completed_event_attributes.result.payloads,
                [AuthorizationDecision],
            )
        elif (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_type.name == "issue_refund"
            and last is not None
        ):
            found.append(last)
    return found


async def _all_grants(deployment: Deployment) -> dict[int, Grant]:
    async with database_for(deployment.settings).connect(grants_store.SCHEMA) as db:
        rows = await db.fetch("SELECT * FROM grants")
    return {int(row["grant_id"]): Grant(**dict(row)) for row in rows}


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _live_at(grant: Grant, moment: datetime) -> bool:
    """Live at `moment`. Both stores write whole seconds: a revocation in the same second as the
    refund cannot be ordered against it, and is not counted against it."""
    if _at(grant.granted_at) > moment:
        return False
    return grant.revoked_at is None or _at(grant.revoked_at) >= moment


# A conversation that took a step into the database outage with at least this much of it left
# beyond REFUND_QUICK_RETRY must say once that it waits: on PostgreSQL, a release (the live grant
# read fails at once); on SQLite, an approval (the ledger's write waits out its 10 s busy timeout
# on each of the quick attempts first).
WAITING_MARGIN = {"postgresql": ("revoked", 2.0), "sqlite": ("escalated", 25.0)}


@dataclass(frozen=True)
class FaultSpan:
    start: float  # time.monotonic()
    end: float
    line: str


async def audit(
    deployment: Deployment, stories: list[Story], faults: list[FaultSpan], quick_retry: float
) -> Audit:
    """Every invariant but the last, over every story. A thread may say "I'm waiting" at most
    once per fault it lived through, and must say it once when it stepped into the database
    outage early enough (WAITING_MARGIN)."""
    client = deployment.client
    assert client is not None
    result = Audit()
    refunds = await Ledger(database_for(deployment.settings)).all_refunds()
    by_workflow: dict[str, list[LedgerRefund]] = {}
    for refund in refunds:
        by_workflow.setdefault(refund.workflow_id, []).append(refund)
    grants = await _all_grants(deployment)
    ours = {s.workflow_id for s in stories if s.workflow_id}
    orders = Counter(r.order_number for r in refunds if r.workflow_id in ours)
    for order, count in orders.items():
        if count > 1:
            result.violate(f"order {order}: refunded {count} times")
    for story in stories:
        await _audit_story(
            client, deployment, story, by_workflow, grants, faults, quick_retry, result
        )
    for inbox_owner, depth in await _inboxes(deployment):
        if depth.waiting or depth.dead:
            result.violate(f"inbox of {inbox_owner} not empty at the end: {depth}")
    return result


async def _inboxes(deployment: Deployment) -> list[tuple[str, Any]]:
    if deployment.database_url is not None:  # one database, every bot's inbox in it
        return [("the bots (PostgreSQL)", await Inbox(database_for(deployment.settings)).depth())]
    bot = deployment.bots[0]
    return [(bot.name, await Inbox(database_for(deployment.settings)).depth())]


async def _audit_story(
    client: Client,
    deployment: Deployment,
    story: Story,
    by_workflow: dict[str, list[LedgerRefund]],
    grants: dict[int, Grant],
    faults: list[FaultSpan],
    quick_retry: float,
    result: Audit,
) -> None:
    label = story.label
    if story.stalled:
        result.violate(f"{label}: stalled ({story.stalled})")
    workflow_id = story.workflow_id
    if workflow_id is None:
        result.violate(f"{label}: never opened")
        return
    thread = story.thread
    assert thread is not None

    # Openings the bot said it could not pass on: no conversation may have started from them.
    for abandoned in story.abandoned:
        stray = f"slack-{TEAM}-{CHANNEL}-{abandoned}"
        try:
            await client.get_workflow_handle(stray).describe()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        else:
            result.violate(
                f"{label}: the opening in thread {abandoned} was answered {NOT_KEPT!r} and "
                "still started a conversation"
            )

    try:
        description = await client.get_workflow_handle(workflow_id).describe()
        events = await decoded_events(client, workflow_id)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        result.violate(f"{label}: no conversation {workflow_id} in Temporal")
        return

    # 1. Each acknowledged message reached the conversation, unless the bot said otherwise.
    signalled = set(delivered_message_ids(events))
    told = {id(a) for a in story.not_kept}
    for ack in story.messages:
        if ack.thread != thread:
            continue  # an abandoned opening: checked above
        if id(ack) in told:
            if ack.message_ts in signalled:
                result.violate(
                    f"{label}: after message {ack.message_ts} the thread said {NOT_KEPT!r}, yet "
                    "the message reached the conversation: the customer wrote it again, and the "
                    "conversation took both"
                )
        elif ack.message_ts not in signalled:
            around = [f.line for f in faults if f.start - 10 <= ack.at <= f.end + 10]
            result.violate(
                f"{label}: message {ack.message_ts} (event {ack.key}) acknowledged by "
                f"{ack.bot} with HTTP 200 never reached {workflow_id}; faults within 10 s of "
                f"the acknowledgement: {'; '.join(around) or 'none'}"
            )

    # 2. The run ended as the story calls for, its sentence last in the thread.
    outcome = _outcome(events)
    expected = EXPECTED[story.kind]
    if description.status != WorkflowExecutionStatus.COMPLETED or outcome is None:
        status = description.status.name if description.status else "?"
        failing = _last_task_failure(events)
        why = f"; its workflow task fails: {failing}" if failing else ""
        result.violate(
            f"{label}: {workflow_id} did not end (status {status}, story at {story.stage}{why})"
        )
    else:
        result.outcomes[outcome.status] += 1
        if outcome.status != expected:
            result.violate(f"{label}: ended {outcome.status!r}, expected {expected!r}")

    posts = agent_posts(deployment, thread)
    steps = [p for p in posts if p.get("text") != WAITING]
    said = [(_kind(p), p.get("text") or "") for p in steps]
    script = SCRIPTS[story.kind]
    if len(said) != len(script) or any(
        kind != want_kind or not text.startswith(want_text)
        for (kind, text), (want_kind, want_text) in zip(said, script, strict=False)
    ):
        result.violate(
            f"{label}: the thread holds {[f'{k}: {t[:40]}' for k, t in said]}, expected "
            f"{[f'{k}: {t[:40]}' for k, t in script]}"
        )
    if outcome is not None and steps and (steps[-1].get("text") != outcome.message):
        result.violate(f"{label}: the thread's last step is not the outcome's sentence")

    # 5. Nothing asked or posted twice.
    keys = Counter(metadata_key(p) for p in posts)
    for key, count in keys.items():
        if count > 1:
            result.violate(f"{label}: post {key} made {count} times")
    questions = Counter(text for kind, text in said if kind == "question")
    for question, count in questions.items():
        if count > 1:
            result.violate(f"{label}: {question!r} asked {count} times")
    waiting = sum(1 for p in posts if p.get("text") == WAITING)
    result.waiting_notices += waiting
    lived = _faults_lived(story, faults)
    if waiting > lived:
        result.violate(f"{label}: said it waits {waiting} times over {lived} fault(s)")
    kind, margin = WAITING_MARGIN[deployment.backend]
    left = story.outage_left
    if story.kind == kind and left is not None and left >= quick_retry + margin and waiting != 1:
        result.violate(
            f"{label}: stepped into the database outage with {left:.0f} s of it left "
            f"(REFUND_QUICK_RETRY={quick_retry:g}s) and said it waits {waiting} times, not once"
        )
    # The bot's own notices: one per message it queued, at most.
    queued = notices(deployment, thread, QUEUED or "")
    result.queued_notices += queued
    result.not_kept_notices += notices(deployment, thread, NOT_KEPT)
    written = sum(1 for a in story.messages if a.thread == thread)
    if queued > written:
        result.violate(f"{label}: {queued} 'briefly unavailable' notices for {written} messages")
    others = [
        p.get("text")
        for p in bot_posts(deployment, thread)
        if not metadata_key(p) and p.get("text") not in (QUEUED, NOT_KEPT)
    ]
    if others:
        result.violate(f"{label}: the bot also said {others}")

    # 3 and 4. The refunds at the owner, each allowed by a grant live at that moment.
    made = by_workflow.get(workflow_id, [])
    result.refunds += len(made)
    result.refund_calls += sum(r.calls for r in made)
    should = 1 if expected == "refunded" else 0
    if len(made) != should:
        result.violate(f"{label}: {len(made)} refunds at the ledger, expected {should}")
    allowed = _authorizations_before_refund(events)
    for refund in made:
        moment = _at(refund.created_at)
        grant = grants.get(allowed[-1].grant_id or -1) if allowed else None
        if not allowed or not allowed[-1].allowed or grant is None:
            result.violate(f"{label}: refund {refund.refund_id} with no allowed authorization")
        elif not _live_at(grant, moment):
            result.violate(
                f"{label}: refund {refund.refund_id} at {refund.created_at} under grant "
                f"{grant.grant_id} ({grant.platform}:{grant.user_id} {grant.role}), live from "
                f"{grant.granted_at} to {grant.revoked_at}"
            )


def _kind(post: dict[str, Any]) -> str:
    payload = (post.get("metadata") or {}).get("event_payload") or {}
    return str(payload.get("kind", "?"))


def _faults_lived(story: Story, faults: list[FaultSpan]) -> int:
    start = story.started or 0.0
    end = story.ended or float("inf")
    return sum(1 for f in faults if f.start <= end and f.end >= start)


async def running_conversations(client: Client) -> list[str]:
    """Conversations Temporal still runs (each should have ended)."""
    found = []
    async with asyncio.timeout(30):
        query = "WorkflowType = 'RefundConversation' AND ExecutionStatus = 'Running'"
        async for execution in client.list_workflows(query):
            found.append(execution.id)
    return found

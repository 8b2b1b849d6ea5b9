"""RefundConversation: one chat thread's refund conversation, as a durable agent loop.

    Signal(-with-start) -> decide: ask | look up | propose -> the refund rules dispose
        -> deny | refund | escalate -> Approve click -> hold? -> live grant read -> the refund

Everything non-deterministic (the model, the stores, the chat platforms, the refund) is an
Activity, so after a crash a new Worker replays this code against Event History and the loop
resumes where it stood. Short steps (the offline decider, the lookups, the rules, the grant read, a
post's first try) are local activities: they run inside the workflow task that needs them and
only their results are recorded. What waits on the outside world (the model, the refund, a slow
platform) is a regular Activity that heartbeats. A step whose dependency is down is retried
quickly, then (the thread told once) patiently as a regular Activity: an outage delays a
conversation, never ends it. Every wait is bounded by its Timing and by WAITS_END_AT_AGE, every
step and post by its retry budget: a conversation's whole life fits in MAX_CONVERSATION_AGE
(agent.lifetime), which the server enforces as its execution timeout.
This is Workflow version 1.2 (agent/versions.py); docs/versioning.md says how a change ships.
"""

# The workflow sandbox runs this module afresh for every conversation it starts or replays, so it
# declares no dataclass (agent.escalation) and keeps its annotations real objects: with
# `from __future__ import annotations` the SDK eval()s each handler's type hints every time.
import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar, cast

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.exceptions import TimeoutError as TimeoutFailure

with workflow.unsafe.imports_passed_through():
    from agent.activities.authorize import AuthorizeActivities
    from agent.activities.decide import DecideActivities
    from agent.activities.lookups import LookupActivities
    from agent.activities.notify import NotifyActivities
    from agent.activities.refund import RefundActivities
    from agent.activities.rules import apply_refund_rules
    from agent.escalation import EscalationRound
    from agent.intake import MESSAGE_UPDATE, answer_text, from_customer, remember
    from agent.lifetime import EDIT_RETRIES, POST_RETRIES
    from agent.models import (
        AGENT_PRINCIPAL,
        ALREADY_REFUNDED,
        Actor,
        AgentStep,
        Answer,
        Approval,
        AuthorizationDecision,
        AuthorizeInput,
        ConversationOutcome,
        ConversationStart,
        ConversationView,
        CustomerMessage,
        DecideInput,
        Disposition,
        HistoryLookup,
        LookupCustomerInput,
        LookupOrderInput,
        Mention,
        MessageEdit,
        MessageKey,
        MessageKind,
        Observation,
        OrderDetails,
        OrderLookup,
        OrderRule,
        OutboundMessage,
        OutcomeStatus,
        Phase,
        PolicyInput,
        PostedMessage,
        QuestionId,
        QuestionPost,
        RefundRequest,
        RefundResult,
        Role,
        RulesInput,
        Takeover,
    )
    from agent.policy import order_number_from
    from agent.rules import already_refunded
    from agent.sayings import (
        DECLINED,
        FINISHED,
        HANDED_BACK,
        HOLD_RAN_OUT,
        NO_DECISION,
        NOT_HEARD_BACK,
        REFUND_FAILED,
        SOMETHING_WENT_WRONG,
        WAITING,
        approvers_reminder,
        customer_reminder,
        escalated,
        money,
        taken_over,
    )
    from agent.versions import MAX_CONVERSATION_AGE, WAITS_END_AT_AGE, WORKFLOW_VERSION
    from agent.visibility import (
        AMOUNT_CENTS,
        APPROVERS_REMINDED,
        ORDER,
        STAGE,
        VERSION_ATTRIBUTE,
        WAITING_FOR_APPROVAL,
        WAITING_SINCE,
    )

WORKFLOW_TYPE = "RefundConversation"

# The loop is bounded so a decider that never decides cannot loop for ever; on the model's path,
# where working memory is re-sent (and recorded) each turn, it also bounds Event History.
MAX_TURNS = 10
KNOWN_QUESTIONS = frozenset({"order_number", "item_opened", "damage"})
# The lookups a decider may ask for, by name; their arguments come from the conversation.
LOOKUPS: dict[str, Callable[..., Awaitable[Any]]] = {
    "lookup_order": LookupActivities.lookup_order,
    "lookup_customer_history": LookupActivities.lookup_customer_history,
    "check_refund_policy": LookupActivities.check_refund_policy,
}
# A bound on what Signals may add to workflow state: a flood of messages cannot grow it without end
# (the ids remembered are bounded by agent.intake.MAX_SEEN_IDS).
MAX_QUEUED_MESSAGES = 20

# A step's own retries, a few within Timing.quick_retry: most failures of a store or an API pass
# in seconds.
QUICK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=5), maximum_attempts=3
)
# Then, with the thread told it waits, for Timing.outage_patience: backing off to one attempt every
# five minutes, never a tight loop.
PATIENT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5), maximum_interval=timedelta(minutes=5)
)
# A chat platform that is down keeps the message: Temporal retries the post for up to a day.
POST_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(minutes=1)
)
# Short steps run locally in a workflow task; a slow store or owner (Stripe) read has this long
# per attempt (the task is heartbeated meanwhile, so it does not time out).
SHORT_STEP_TIMEOUT = timedelta(seconds=10)
# What one attempt of the model's step and of the refund may take.
MODEL_STEP_TIMEOUT = timedelta(seconds=60)
REFUND_STEP_TIMEOUT = timedelta(minutes=1)
# The Worker-loss detection window for Activities that wait on the outside world: they heartbeat
# every second, so a slow call is not taken for a dead Worker, and a dead Worker's call is retried
# elsewhere within seconds.
HEARTBEAT_TIMEOUT = timedelta(seconds=4)
# A longer window for the calls a retry would make twice at a cost: the refund (its idempotency
# key then returns the same refund, but the owner was still asked twice) and the model's step (a
# second paid call, whose answer may differ). A heartbeat timeout counts from the server's
# hand-over of the task (ActivityTaskStarted), not from the moment the Worker runs it: a Worker
# busy with other conversations (one interpreter; its event loop shares the GIL with up to
# MAX_CONCURRENT_WORKFLOW_TASKS workflow tasks) has started an Activity more than 4 s after taking
# it, and the 4 s window then retried a call that was still going. This window is the lag the
# Worker is built to keep under load: a workflow task waits at most its 10 s timeout
# (MAX_CONCURRENT_WORKFLOW_TASKS in worker.runner), and a Worker lagging more is failing its
# conversations' workflow tasks already. (A Worker that also ran local steps used to start these
# tens of seconds late, behind them; the Worker process polls them apart, worker.pair.) A call in
# flight when its Worker dies is retried after it (the crash drill's kill after the effect), not
# after 4 s.
COSTLY_CALL_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
# A post is first tried inside the workflow task that decided it (one attempt): a healthy platform
# answers in tens of milliseconds. A platform slower than this, or failing, ends the try and the
# regular Activity takes over with its day of retries (POST_RETRY).
LOCAL_POST_TIMEOUT = timedelta(seconds=5)
# A timer's summary names what it is for (no customer text): /refund-status shows the next one.
AGE_LIMIT = "close: the conversation's age limit"

T = TypeVar("T")


def idempotency_key_for(workflow_id: str, first_run_id: str) -> str:
    """One key per conversation: stable across retries and Worker crashes within it.

    It follows the first run id, so it survives Continue-As-New but changes if the Workflow ID is
    reused for a new conversation.
    """
    digest = hashlib.sha256(f"{workflow_id}:{first_run_id}".encode()).hexdigest()
    return f"refund-bot-{digest[:40]}"


def _cause(err: ActivityError) -> str:
    """The failed Activity's own message: for the log and Event History, never for a thread."""
    return getattr(err.cause, "message", None) or str(err.cause or err)


async def _local_activity(
    activity: Callable[..., Awaitable[T]],
    arg: Any,
    *,
    start_to_close: timedelta,
    retry_policy: RetryPolicy,
    schedule_to_close: timedelta | None = None,
) -> T:
    """A local activity that fails as a regular Activity does, with an ActivityError, whether it
    runs or replays.

    The SDK does not raise what a regular Activity raises, nor the same on replay as on its first
    run (temporalio 1.35, its core's local activity machine):
        fails for good                  -> its own ApplicationError (run and replay alike)
        times out (start- or schedule-  -> run:    ActivityError, the TimeoutError its cause
        to-close), first run               replay: the bare TimeoutError the marker recorded
    To this conversation each is a step that failed: permanently when the error says no retry
    can fix it (_permanent), and the customer is told so; a timeout is an outage to wait out.
    Caught here, in one place, a replay takes the path its first run took and emits the same
    commands (a bare TimeoutError would fail the Workflow on replay: a nondeterminism error).
    """
    name = getattr(activity, "__name__", str(activity))
    try:
        return await workflow.execute_local_activity(
            activity,
            arg,
            start_to_close_timeout=start_to_close,
            schedule_to_close_timeout=schedule_to_close,
            retry_policy=retry_policy,
        )
    except ApplicationError as err:
        retry = (
            RetryState.NON_RETRYABLE_FAILURE
            if err.non_retryable
            else RetryState.MAXIMUM_ATTEMPTS_REACHED
        )
        raise _failed(name, err.message, retry) from err
    except TimeoutFailure as err:
        raise _failed(name, err.message, RetryState.TIMEOUT) from err


def _failed(name: str, message: str, retry_state: RetryState) -> ActivityError:
    """The ActivityError a regular Activity's failure would raise (raised from the local one's,
    which becomes its cause: _cause reads it)."""
    return ActivityError(
        f"{name} failed: {message}",
        scheduled_event_id=0,
        started_event_id=0,
        identity="",
        activity_type=name,
        activity_id="",
        retry_state=retry_state,
    )


def _permanent(err: ActivityError) -> bool:
    """A failure no retry can fix (a refused key, a request the API rejects): the Activity said so
    with a non-retryable error. Everything else (timeouts, 5xx, a store that does not answer) is
    an outage to wait out."""
    return err.retry_state == RetryState.NON_RETRYABLE_FAILURE


def _nothing_usable(step: AgentStep, why: str) -> AgentStep:
    """A decision of nothing: the decider gave no usable step, so the rules and a person decide."""
    return AgentStep(action="decide", outcome=None, rationale=why, source=step.source)


class _Declined(Exception):
    """A support agent pressed Deny."""


class _Idle(Exception):
    """The customer did not answer in time."""


class _Undecided(Exception):
    """No support agent decided the escalation in time."""


class _HoldRanOut(Exception):
    """The presenter's hold before the refund was not released in time."""


@workflow.defn(name=WORKFLOW_TYPE)
class RefundConversation:
    @workflow.init
    def __init__(self, start: ConversationStart) -> None:
        # EXECUTION STATE: everything below is rebuilt by replay after a crash. The input is taken
        # here, not in run(), because signal-with-start delivers its Signal before run() begins.
        self._start = start
        self._timing = start.timing
        self._memory: list[Observation] = []
        self._phase: Phase = "deciding"
        self._pending_question: str | None = None
        self._decision: str | None = None
        self._refund: RefundResult | None = None
        self._seq = 0
        # Signals land here in arrival order; the loop takes them when it is ready for them.
        self._inbox: list[CustomerMessage] = []
        self._approvals: list[Approval] = []
        self._seen_ids: list[str] = [start.opening_message_id]
        self._released = False
        # Escalation rounds: each post of Approve / Deny opens one; a click answers one round.
        self._round = 0
        self._escalation: EscalationRound | None = None  # the latest round
        self._settled: dict[int, MessageEdit] = {}  # round -> the edit that says what happened
        self._stage: str | None = None  # what /refund-queue reads (RefundBotStage)
        # A person who took the conversation over (/refund-takeover): the agent stays quiet, and
        # what the customer writes meanwhile waits here, in order, until it is handed back.
        self._taken_over: Actor | None = None
        self._held: list[CustomerMessage] = []
        self._told_waiting = False  # the thread knows a step waits out an outage
        # The key the decide step posts its question under (1.1 on); None: the Workflow posts it.
        self._question_key: MessageKey | None = None
        # A conversation 1.0's code ran: it keeps 1.0's commands where 1.1 changed them without a
        # marker (agent.versions.PATCHES, marker=False). Set in run(), from what it recorded.
        self._on_1_0 = False
        # How the customer's words name the order (agent.policy.order_number_from): set on the
        # first turn, kept to the end.
        self._order_rule: OrderRule = "first"

    # ------------------------------------------------------------------------------------------
    # The loop
    # ------------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: ConversationStart) -> ConversationOutcome:
        self._record_version()
        try:
            decision = await self._dispose(await self._agent_loop(start))
            order = self._order()
            if decision.outcome == "deny" or order is None:
                return await self._close("denied", f"I can't refund this order. {decision.reason}")
            approver: Actor = AGENT_PRINCIPAL
            role: Role = "refund_agent"
            if decision.outcome != "approve":
                approver, role = await self._escalate(order, decision.reason)
            await self._hold_before_refund(order)
            await self._authorized(order, approver, role)
            return await self._refund_order(order)
        except _Declined:
            return await self._close("declined", DECLINED, settled="refund declined.")
        except _Idle:
            return await self._close("expired", NOT_HEARD_BACK)
        except _Undecided:
            return await self._close(
                "expired",
                NO_DECISION,
                settled="no decision was made in time, so this request is closed.",
            )
        except _HoldRanOut:
            return await self._close("expired", HOLD_RAN_OUT)
        except ActivityError as err:
            # A step failed for good (a model that refuses the call, retries exhausted, ...).
            await self._say_failed(err)
            raise  # the run fails loudly for an operator, with the detail in Event History

    def _record_version(self) -> None:
        """RefundBotVersion says which code ran this conversation's first task, for the Worker
        that must one day replay it. The starter sets it (agent.versions.version_attributes); this
        task corrects it when it is missing or names another version (a split deploy: a starter and
        a Worker of different releases). A replay takes the branch its first run took: a value
        that was missing was set by every version, a different one only by code with the marker."""
        recorded = workflow.info().typed_search_attributes.get(VERSION_ATTRIBUTE)
        corrected = recorded is not None and recorded != WORKFLOW_VERSION
        if corrected and not workflow.patched("version-in-first-task"):
            corrected = False  # replaying 1.1's first task, which left a value as it was
        # 1.0's code always corrected it, so "1.0" left as it is means 1.0's code ran this task
        # (or 1.1's, from a 1.0 starter: the decide step's marker then says so, in _decide).
        self._on_1_0 = recorded == "1.0" and not corrected
        if recorded is None or corrected:
            workflow.upsert_search_attributes([VERSION_ATTRIBUTE.value_set(WORKFLOW_VERSION)])

    def _has(self, change: str) -> bool:
        """Whether this conversation takes `change`, one of the changes 1.1 made without a marker
        (agent.versions.PATCHES, marker=False): every conversation but those 1.0's code ran."""
        return not self._on_1_0

    async def _agent_loop(self, start: ConversationStart) -> AgentStep:
        """Turns of the decider until it proposes a decision (or gives nothing usable)."""
        asked_on = workflow.info().workflow_start_time.date()
        # From 1.2 a number named as the order wins and amounts are never one; a conversation
        # started before reads the first number to its end (docs/versioning.md).
        if workflow.patched("order-number-named"):
            self._order_rule = "named"
        step = AgentStep(action="decide", source=start.decider)
        for turn in range(1, MAX_TURNS + 1):
            await self._while_taken_over()
            self._phase = "deciding"
            step = await self._decide(
                DecideInput(
                    opening_text=start.opening_text,
                    memory=self._memory,
                    turn=turn,
                    decider=start.decider,
                    asked_on=asked_on,
                    order_rule=self._order_rule,
                )
            )
            workflow.logger.info(
                "EXECUTION STATE | turn=%d step=%s %s", turn, step.action, step.summary
            )
            if step.action == "decide":
                return step
            if step.action == "ask":
                self._memory.append(await self._ask(step))
                continue
            tools = [step.tool or "", *step.parallel_tools]
            if unknown := next((t for t in tools if t not in LOOKUPS), None):
                return _nothing_usable(step, f"asked for an unknown tool: {unknown[:80]}")
            self._phase = "looking_up"
            self._memory.extend(await asyncio.gather(*(self._lookup(t) for t in tools)))
        return _nothing_usable(step, "did not decide within the turn budget")

    async def _decide(self, request: DecideInput) -> AgentStep:
        if request.decider == "policy":
            # The offline policy is pure and quick: a local step. Its result is recorded (a marker)
            # and replayed; the working memory it read is not recorded. From 1.1 it posts the
            # question it asks (DecideInput.post_question): a turn is then one local step, one
            # activation of the Worker fewer; a conversation started before keeps posting apart
            # (docs/versioning.md). The key is taken now, so that a post made while the step runs
            # (a takeover's sentence) cannot take it; a step that does not ask leaves it unused.
            self._question_key = None
            if workflow.patched("question-in-decide"):
                self._on_1_0 = False  # 1.1's code ran it, whatever its starter recorded
                self._seq += 1
                self._question_key = self._key()
                where = QuestionPost(
                    thread=self._start.thread,
                    key=self._question_key,
                    within_seconds=LOCAL_POST_TIMEOUT.total_seconds(),
                )
                request = request.model_copy(update={"post_question": where})
            return await self._short_step(DecideActivities.decide_next_step, request)
        # MODEL CALL: recorded once in Event History; replay returns it without calling again. The
        # model needs the whole working memory each turn, and an Activity's input is recorded, so
        # this path's history grows with the square of the turns, bounded by MAX_TURNS.
        return await self._step(
            DecideActivities.decide_next_step,
            request,
            start_to_close=MODEL_STEP_TIMEOUT,
            heartbeat=COSTLY_CALL_HEARTBEAT_TIMEOUT,
        )

    async def _dispose(self, step: AgentStep) -> Disposition:
        """The refund rules' answer to the decider's proposal, over the owner's records: the
        lookups the decider skipped are run first, so no decision is taken without the facts."""
        order_number = order_number_from(self._start.opening_text, self._memory, self._order_rule)
        if order_number is not None:
            done = {o.kind for o in self._memory}
            missing = [t for t in ("lookup_order", "lookup_customer_history") if t not in done]
            if missing:
                self._phase = "looking_up"
                self._memory.extend(await asyncio.gather(*(self._lookup(t) for t in missing)))
        self._phase = "deciding"
        decision = await self._short_step(
            apply_refund_rules,
            RulesInput(
                proposal=step.outcome,
                decider=step.source,
                order_number=order_number,
                order=next((o for o in self._memory if isinstance(o, OrderLookup)), None),
                history=next((o for o in self._memory if isinstance(o, HistoryLookup)), None),
                asked_on=workflow.info().workflow_start_time.date(),
            ),
        )
        workflow.logger.info("RULES | %s", decision.summary)
        self._decision = decision.outcome
        return decision

    async def _ask(self, step: AgentStep) -> Answer:
        """The customer's answer to the step's question (a person may hold the conversation
        meanwhile: what the customer wrote to them answers it once it is handed back)."""
        if step.question_id not in KNOWN_QUESTIONS:
            await self._fail(
                f"the agent asked an unknown question: {step.question_id}", "UnknownQuestion"
            )
        question = step.question or ""
        if step.posted is None:
            # Not posted by the decide step: asked by the model, or a version before 1.1, or its
            # try there failed (a slow or failing platform: then straight to the Activity that
            # retries, under the key it tried).
            await self._post("question", question, tried=self._question_key)
        self._phase, self._pending_question = "waiting_for_customer", question
        message = await self._next_customer_message(question)
        self._pending_question = None
        return Answer(
            question_id=cast(QuestionId, step.question_id),  # checked against KNOWN_QUESTIONS
            text=message.text,
            message_id=message.message_id,
        )

    async def _next_customer_message(self, question: str) -> CustomerMessage:
        """The customer's next message: one reminder if they are silent, closed if still silent.
        While a person holds the conversation the clock stops, and starts again at the hand-back."""
        timing = self._timing
        # Without the reminders (1.0): one wait of customer_idle, then closed.
        reminders = self._has("reminders")
        reminded = not reminders
        left = timing.customer_idle - (timing.customer_reminder if reminders else timedelta())
        while True:
            await self._while_taken_over()

            def ready() -> bool:
                return bool(self._inbox) or self._taken_over is not None

            # DURABLE WAIT: no Worker needs to stay alive while the customer types.
            if reminded:
                if not await self._wait(ready, left, "close: the customer is silent"):
                    raise _Idle
            elif not await self._wait(ready, timing.customer_reminder, "remind the customer"):
                reminded = True
                await self._post("info", customer_reminder(question, left))
                continue
            if self._taken_over is None:
                return self._inbox.pop(0)

    async def _while_taken_over(self) -> None:
        """DURABLE WAIT: while a person has the conversation, the agent says and decides nothing.
        Bounded only by the conversation's age: the person hands it back, or it closes."""
        if self._taken_over is not None:
            await self._wait(lambda: self._taken_over is None, MAX_CONVERSATION_AGE, AGE_LIMIT)
            if self._taken_over is not None:
                raise _Idle

    async def _lookup(self, tool: str) -> Observation:
        # Tool arguments come from the conversation, never from the model.
        customer = self._start.customer
        order_number = (
            order_number_from(self._start.opening_text, self._memory, self._order_rule) or ""
        )
        arg: LookupOrderInput | LookupCustomerInput | PolicyInput
        if tool == "lookup_order":
            arg = LookupOrderInput(order_number=order_number, customer=customer)
        elif tool == "lookup_customer_history":
            arg = LookupCustomerInput(customer=customer)
        else:
            arg = PolicyInput(
                order_number=order_number,
                customer=customer,
                asked_on=workflow.info().workflow_start_time.date(),
            )
        observation: Observation = await self._short_step(LOOKUPS[tool], arg)
        return observation

    # ------------------------------------------------------------------------------------------
    # Escalation, hold, authorization, the effect
    # ------------------------------------------------------------------------------------------

    async def _escalate(self, order: OrderDetails, why: str) -> tuple[Actor, Role]:
        text = escalated(
            order.order_number, order.item, order.amount_cents, why, self._timing.approval_reminder
        )
        return await self._approved(await self._offer(text))

    async def _approved(self, approval: Approval) -> tuple[Actor, Role]:
        """Who approved, once a click approves. A Deny that counts ends the conversation."""
        while approval.decision == "deny":
            # A Deny counts only from someone who may decide refunds, read live like an approval.
            check = await self._authorize(approval.actor, "refund_approver", 0)
            if check.allowed:
                raise _Declined
            # The click's buttons are gone (the adapter replaced them): offer them again.
            approval = await self._offer(
                f"{approval.actor.label} can't decline this refund: {check.reason}.",
                settled=f"not counted ({check.reason}).",
            )
        self._queued(None)  # decided: off /refund-queue
        return approval.actor, "refund_approver"

    async def _offer(self, text: str, settled: str | None = None) -> Approval:
        """Post a new escalation round with Approve / Deny and return the click that answers it.

        `settled` says what became of the previous round's click; its message is edited to say so
        once the new round is posted.
        """
        self._round += 1  # EXECUTION STATE: clicks are bound to this round
        previous = self._escalation
        posted = await self._post(
            "escalation", text, actions=["approve", "deny"], round=self._round
        )
        # The buttons are up: a click on them counts from now on.
        self._escalation = EscalationRound(
            number=self._round, key=self._key(), text=text, message_id=posted.platform_message_id
        )
        self._phase = "waiting_for_approval"
        self._queued(WAITING_FOR_APPROVAL)
        if previous is not None and settled is not None:
            await self._settle(previous, settled)
        return await self._next_approval()

    async def _next_approval(self) -> Approval:
        """The click that answers the open round. If nobody decides within the reminder's time,
        the approvers are reminded once in the thread; past the approval timeout, it is closed.
        While a person holds the conversation the agent says nothing and the clock stops (it
        starts again at the hand-back); a click still counts meanwhile."""
        timing = self._timing
        posted_at = workflow.now()
        # Without the reminders (1.0): one wait until approval_timeout, then closed.
        reminded = timing.approval_reminder >= timing.approval_timeout or not self._has("reminders")
        while True:
            self._phase = "waiting_for_approval"
            if self._taken_over is not None and not self._approvals:
                held_since = workflow.now()
                await self._wait(
                    lambda: bool(self._approvals) or self._taken_over is None,
                    MAX_CONVERSATION_AGE,
                    AGE_LIMIT,
                )
                posted_at += workflow.now() - held_since
                continue
            until = posted_at + (timing.approval_timeout if reminded else timing.approval_reminder)
            summary = "close: no decision" if reminded else "remind the approvers"

            def ready() -> bool:
                return bool(self._approvals) or self._taken_over is not None

            # DURABLE WAIT: the escalation may sit for days; no process holds it.
            if not await self._wait(ready, until - workflow.now(), summary):
                if reminded:
                    raise _Undecided
                reminded = True
                await self._remind_approvers(workflow.now() - posted_at)
                continue
            if not self._approvals:
                continue  # taken over: wait for a click or the hand-back, clock stopped
            approval = self._approvals.pop(0)
            if approval.round != self._round:
                # A click on an earlier round's buttons, or a second click on a round already
                # answered: never taken as a fresh decision on this round.
                workflow.logger.info(
                    "DROPPED | %s's %s click on escalation round %s; round %d is open",
                    approval.actor.label,
                    approval.decision,
                    approval.round,
                    self._round,
                )
                await self._restore_settled(approval.round)
                continue
            assert self._escalation is not None
            self._escalation.answer = approval
            return approval

    async def _remind_approvers(self, waited: timedelta) -> None:
        order = self._order()
        if order is None:
            return
        await self._post(
            "info",
            approvers_reminder(order.order_number, order.amount_cents, waited),
            mention="approvers",
        )
        workflow.upsert_search_attributes([APPROVERS_REMINDED.value_set(True)])

    def _queued(self, stage: str | None) -> None:
        """What /refund-queue reads, in visibility: this conversation waits for a decision (order,
        amount, since when), or no longer does. Only changes are written."""
        if stage == self._stage or not self._has("approval-queue"):
            return
        self._stage = stage
        order = self._order()
        if stage is None or order is None:
            workflow.upsert_search_attributes([STAGE.value_unset()])
            return
        workflow.upsert_search_attributes(
            [
                STAGE.value_set(stage),
                ORDER.value_set(order.order_number),
                AMOUNT_CENTS.value_set(order.amount_cents),
                WAITING_SINCE.value_set(workflow.now()),
                APPROVERS_REMINDED.value_set(False),
            ]
        )

    async def _hold_before_refund(self, order: OrderDetails) -> None:
        if not self._start.hold_before_refund:
            return
        # DEMO HOOK + DURABLE WAIT: the crash drill lands here every time. A real deployment has
        # no hold and recovers the same way from wherever the Worker died.
        await self._post(
            "info",
            f"Refund of {money(order.amount_cents)} approved. Holding before the refund for the "
            "demo: a presenter releases it with /refund-release.",
        )
        self._phase = "held_before_refund"  # set once nothing is in flight: only the wait remains
        if not await self._wait(lambda: self._released, self._timing.hold_timeout, "end the hold"):
            raise _HoldRanOut

    async def _authorized(self, order: OrderDetails, approver: Actor, role: Role) -> None:
        """Return once a live grant covers the refund; each miss is told in the thread."""
        while True:
            check = await self._authorize(approver, role, order.amount_cents)
            if check.allowed:
                return
            if approver == AGENT_PRINCIPAL:
                await self._post("info", f"I can't refund this on my own: {check.reason}.")
                approver, role = await self._escalate(
                    order, "The agent's own grant does not cover it."
                )
            else:
                approver, role = await self._approved(
                    await self._offer(
                        f"No refund yet: {check.reason}. Waiting for approval from a support "
                        "agent with a live refund grant.",
                        settled=f"not counted ({check.reason}).",
                    )
                )

    async def _authorize(
        self, principal: Actor, role: Role, amount_cents: int
    ) -> AuthorizationDecision:
        self._phase = "authorizing"
        # AUTHORIZATION STATE: read live from its owner right now; never cached in this Workflow.
        # As a local step it runs in the very workflow task that then schedules issue_refund, so
        # the read is milliseconds old when the refund starts. If that task never completes (the
        # Worker dies), its result is thrown away with it and the next task reads the grant again:
        # a recorded "allowed" only ever precedes the refund it was read for.
        return await self._short_step(
            AuthorizeActivities.authorize_refund,
            AuthorizeInput(
                principal=principal,
                role=role,
                amount_cents=amount_cents,
                workflow_id=workflow.info().workflow_id,
            ),
        )

    async def _refund_order(self, order: OrderDetails) -> ConversationOutcome:
        info = workflow.info()
        self._phase = "refunding"
        try:
            # EXTERNAL EFFECT: every attempt, through any outage, sends the same idempotency key.
            result = await self._step(
                RefundActivities.issue_refund,
                RefundRequest(
                    idempotency_key=idempotency_key_for(
                        info.workflow_id, info.first_execution_run_id
                    ),
                    workflow_id=info.workflow_id,
                    order_number=order.order_number,
                    payment_ref=order.payment_ref,
                    amount_cents=order.amount_cents,
                    currency=order.currency,
                ),
                start_to_close=REFUND_STEP_TIMEOUT,
                heartbeat=COSTLY_CALL_HEARTBEAT_TIMEOUT,
            )
        except ActivityError as err:
            workflow.logger.error("EXTERNAL EFFECT | refund failed: %s", _cause(err))
            # The owner's own words (Stripe's, the ledger's) stay in Event History and the log.
            return await self._close(
                "failed",
                REFUND_FAILED,
                settled="the refund could not be issued; a support agent will follow up.",
                detail=_cause(err),
            )
        self._refund = result
        if result.status == ALREADY_REFUNDED and result.earlier is not None:
            # Another conversation refunded this order first; the owner refused a second refund.
            said = already_refunded(order.order_number, result.earlier)
            return await self._close(
                "denied",
                f"I can't refund this order. {said}",
                result,
                settled=f"no refund made. {said}",
            )
        if result.status == "succeeded":
            text = (
                f"Your refund is complete: {money(result.amount_cents)} for order "
                f"{order.order_number} ({order.item}) is on its way back to your original payment "
                f"method. Reference {result.refund_id}."
            )
            settled = f"refund issued ({money(result.amount_cents)}, reference {result.refund_id})."
        else:
            # Say "complete" only when the owner says succeeded.
            text = (
                f"Your refund of {money(result.amount_cents)} was accepted and is "
                f"{result.status}. Reference {result.refund_id}."
            )
            settled = f"refund accepted and {result.status} (reference {result.refund_id})."
        return await self._close("refunded", text, result, settled=settled)

    # ------------------------------------------------------------------------------------------
    # Helpers
    # ------------------------------------------------------------------------------------------

    async def _wait(self, ready: Callable[[], bool], at_most: timedelta, summary: str) -> bool:
        """Wait until `ready`, for `at_most` and never past the age at which waits end
        (WAITS_END_AT_AGE: the rest of the window docs/versioning.md counts on is for what follows
        the last wait). False if time ran out. The timer's summary says what it is for
        (/refund-status shows the next one)."""
        age_left = workflow.info().workflow_start_time + WAITS_END_AT_AGE - workflow.now()
        if age_left < at_most:
            at_most, summary = age_left, AGE_LIMIT
        try:
            await workflow.wait_condition(
                ready, timeout=max(at_most, timedelta()), timeout_summary=summary
            )
        except TimeoutError:
            return ready()
        return True

    async def _short_step(self, activity: Callable[..., Awaitable[T]], arg: Any) -> T:
        """A store read, the offline decider or the rules: a local activity, retried quickly; a
        dependency still down after that is waited out (_outlast)."""
        try:
            return await _local_activity(
                activity,
                arg,
                start_to_close=SHORT_STEP_TIMEOUT,
                retry_policy=QUICK_RETRY,
                schedule_to_close=self._timing.quick_retry + SHORT_STEP_TIMEOUT,
            )
        except ActivityError as err:
            if _permanent(err):
                raise
            failure = _cause(err)
        return await self._outlast(activity, arg, failure, start_to_close=SHORT_STEP_TIMEOUT)

    async def _step(
        self,
        activity: Callable[..., Awaitable[T]],
        arg: Any,
        *,
        start_to_close: timedelta,
        heartbeat: timedelta = HEARTBEAT_TIMEOUT,
    ) -> T:
        """A step that waits on the outside world (the model, the refund's owner): a regular
        Activity that heartbeats, retried quickly; a dependency still down is waited out."""
        try:
            return await workflow.execute_activity(
                activity,
                arg,
                start_to_close_timeout=start_to_close,
                heartbeat_timeout=heartbeat,
                schedule_to_close_timeout=self._timing.quick_retry + start_to_close,
                retry_policy=QUICK_RETRY,
            )
        except ActivityError as err:
            if _permanent(err):
                raise
            failure = _cause(err)
        return await self._outlast(
            activity, arg, failure, start_to_close=start_to_close, heartbeat=heartbeat
        )

    async def _outlast(
        self,
        activity: Callable[..., Awaitable[T]],
        arg: Any,
        failure: str,
        *,
        start_to_close: timedelta,
        heartbeat: timedelta | None = None,
    ) -> T:
        """Wait a dependency's outage out: the thread is told once that the request waits on
        something on our side, and the step is retried with backoff for Timing.outage_patience,
        as a regular Activity so that its attempts, its last failure and since when it waits are
        the server's to show (/refund-status reads them with no Worker alive)."""
        name = getattr(activity, "__name__", str(activity))
        workflow.logger.warning(
            "WAITING | %s still fails after %s (%s); retried for up to %s",
            name,
            self._timing.quick_retry,
            failure,
            self._timing.outage_patience,
        )
        if not self._told_waiting:
            self._told_waiting = True
            await self._post("info", WAITING)
        result: T = await workflow.execute_activity(
            activity,
            arg,
            start_to_close_timeout=start_to_close,
            heartbeat_timeout=heartbeat,
            schedule_to_close_timeout=self._timing.outage_patience,
            retry_policy=PATIENT_RETRY,
        )
        self._told_waiting = False  # over: a later outage is told again
        return result

    async def _post(
        self,
        kind: MessageKind,
        text: str,
        actions: list | None = None,
        round: int | None = None,
        mention: Mention | None = None,
        *,
        tried: MessageKey | None = None,
    ) -> PostedMessage:
        """`tried`: the key this message was already tried under inside a workflow task (the
        decide step's question): no second try, the Activity posts it under that key."""
        if tried is None:
            self._seq += 1
        message = OutboundMessage(
            thread=self._start.thread,
            key=tried or self._key(),
            kind=kind,
            text=text,
            actions=actions or [],
            round=round,
            mention=mention,
        )
        if tried is None:
            try:
                # EXTERNAL EFFECT: the post, tried once inside this workflow task.
                return await _local_activity(
                    NotifyActivities.post_to_thread,
                    message,
                    start_to_close=LOCAL_POST_TIMEOUT,
                    retry_policy=RetryPolicy(maximum_attempts=1),
                )
            except ActivityError:
                # The platform is slow or down. The Activity below retries for a day; if the try
                # posted before it failed, the message key returns that post.
                pass
        # EXTERNAL EFFECT: a chat message, posted at most once per stable key.
        return await workflow.execute_activity_method(
            NotifyActivities.post_to_thread,
            message,
            # A platform may make one post wait out its rate limits for minutes (Slack honours
            # Retry-After inside the call); the heartbeat still notices a dead Worker in seconds.
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            schedule_to_close_timeout=POST_RETRIES,
            retry_policy=POST_RETRY,
        )

    def _key(self) -> MessageKey:
        """The stable key of the latest post."""
        info = workflow.info()
        return MessageKey(workflow_id=info.workflow_id, run_id=info.run_id, seq=self._seq)

    async def _settle(self, escalation: EscalationRound | None, outcome: str) -> None:
        """Edit an escalation to say what became of it (the adapters left "Approved by X,
        checking authorization" there, or its buttons if nobody clicked). Once per round."""
        if escalation is None or escalation.settled:
            return
        escalation.settled = True
        answer = escalation.answer
        edit = MessageEdit(
            thread=self._start.thread,
            key=escalation.key,
            platform_message_id=escalation.message_id,
            text=escalation.text,
            outcome=outcome,
            decision=answer.decision if answer else None,
            decided_by=answer.actor if answer else None,
        )
        self._settled[escalation.number] = edit
        await self._edit(edit)

    async def _restore_settled(self, round: int | None) -> None:
        # A late click's adapter may have written "checking authorization" over a settled round's
        # outcome before its Signal arrived; say the outcome again.
        edit = self._settled.get(round) if round is not None else None
        if edit is not None:
            await self._edit(edit)

    async def _edit(self, edit: MessageEdit) -> None:
        try:
            # EXTERNAL EFFECT: an edit of an earlier post; repeating it changes nothing.
            await workflow.execute_activity_method(
                NotifyActivities.edit_thread_message,
                edit,
                start_to_close_timeout=timedelta(minutes=5),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                schedule_to_close_timeout=EDIT_RETRIES,
                retry_policy=POST_RETRY,
            )
        except ActivityError as err:
            # The outcome was already said in the thread; a message that cannot be edited (it was
            # deleted, say) must not turn that into a failed conversation.
            workflow.logger.warning("could not edit escalation %s: %s", edit.key, _cause(err))

    async def _close(
        self,
        status: OutcomeStatus,
        text: str,
        refund: RefundResult | None = None,
        *,
        settled: str | None = None,
        detail: str | None = None,
    ) -> ConversationOutcome:
        self._phase = "closed"
        # The outcome is tried inside this workflow task too, so the run can complete in it. A
        # message the customer writes meanwhile is not lost: the server refuses to complete a run
        # while a Signal waits, and the task is tried again with that Signal in it.
        await self._post("outcome", text)
        if settled is not None:
            await self._settle(self._escalation, settled)
        if self._inbox:
            # Messages this run never read as answers (written while it looked things up, waited
            # for a support agent, or posted its outcome): the router still saw a running
            # conversation and signalled it, so the answer the router gives is this one's to give.
            await self._post("info", FINISHED)
        return ConversationOutcome(status=status, message=text, refund=refund, detail=detail)

    async def _say_failed(self, err: ActivityError) -> None:
        """The customer hears, in one plain sentence, that this conversation ends here."""
        workflow.logger.error(
            "CONVERSATION FAILED | %s failed for good: %s", err.activity_type, _cause(err)
        )
        self._phase = "closed"
        try:
            await self._post("outcome", SOMETHING_WENT_WRONG)
            await self._settle(
                self._escalation,
                "something went wrong on our side; a support agent will follow up.",
            )
        except ActivityError as also:
            workflow.logger.error("could not say so in the thread either: %s", _cause(also))

    async def _fail(self, reason: str, error_type: str) -> None:
        # The customer hears something went wrong; the run fails loudly for an operator to see.
        await self._post("info", SOMETHING_WENT_WRONG)
        raise ApplicationError(reason, type=error_type, non_retryable=True)

    def _order(self) -> OrderDetails | None:
        lookup = next((o for o in self._memory if isinstance(o, OrderLookup)), None)
        return lookup.order if lookup else None

    # ------------------------------------------------------------------------------------------
    # Signals, the Update and the query
    # ------------------------------------------------------------------------------------------

    @workflow.signal
    def customer_message(self, message: CustomerMessage) -> None:
        # EXECUTION STATE: the Signal is in Event History before this runs, so it survives a crash.
        self._take_message(message)

    # No validator: an Update rejects nothing the Signal would have taken. Handled as the Signal
    # is, and returns at once (never waits for the agent's reply), so the router's call returns
    # as soon as the message is recorded.
    @workflow.update(name=MESSAGE_UPDATE)
    def customer_message_now(self, message: CustomerMessage) -> None:
        """The customer's message as an Update: the server hands it to a polling Worker at once,
        where a Signal's workflow task waits for the next read of the transfer queue (up to 50 ms
        on a server with Temporal's default settings; docs/benchmarks.md, "A turn on a server with
        Temporal's default settings"). A Worker without this handler rejects it, and the router
        sends the Signal instead."""
        # EXECUTION STATE: the accepted Update is in Event History (its input in the
        # UpdateAccepted event), so it survives a crash as a Signal does.
        self._take_message(message)

    def _take_message(self, message: CustomerMessage) -> None:
        # The rule agent/history.py reads back from the recorded messages (agent/intake.py); a
        # message delivered both ways (an Update not accepted in time, then its Signal) is
        # taken once, by its id.
        if not remember(self._seen_ids, message.message_id):
            return  # a platform retry or a reconnect replay: applied once
        if not from_customer(message, self._start.customer):
            # Recorded in history (the Signal itself) but never taken as an answer.
            workflow.logger.info("message %s is not from the thread's customer", message.message_id)
            return
        text = answer_text(message)
        if not text or len(self._inbox) + len(self._held) >= MAX_QUEUED_MESSAGES:
            return
        if self._taken_over is not None and self._phase != "closed":
            # For the person now; answers, in order, once it is handed back.
            self._held.append(message.model_copy(update={"text": text}))
            return
        self._inbox.append(message.model_copy(update={"text": text}))

    @workflow.signal
    def approval(self, approval: Approval) -> None:
        if not remember(self._seen_ids, f"click:{approval.click_id}"):
            return
        if approval.round is None:
            # A click that names no round answers the round open when it arrives, and only that.
            approval = approval.model_copy(update={"round": self._round})
        self._approvals.append(approval)

    @workflow.signal
    def release(self) -> None:
        self._released = True

    # A takeover's sentence is abandoned if the conversation ends while it is being posted.
    @workflow.signal(unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON)
    async def takeover(self, change: Takeover) -> None:
        """A person takes the conversation over, or hands it back: said once in the thread. What
        the customer wrote meanwhile is taken in order at the hand-back, as if it came then, so
        it answers the question it was waiting for and no question is asked twice. Approvals
        still count while it is taken over."""
        if change.taken == (self._taken_over is not None) or self._phase == "closed":
            return  # already so: a repeated command
        self._taken_over = change.actor if change.taken else None
        if not change.taken:
            self._inbox.extend(self._held)
            self._held = []
        await self._post("info", taken_over(change.actor.label) if change.taken else HANDED_BACK)

    @workflow.query
    def view(self) -> ConversationView:
        return ConversationView(
            workflow_id=workflow.info().workflow_id,
            phase=self._phase,
            customer=self._start.customer,
            answers={o.question_id: o.text for o in self._memory if isinstance(o, Answer)},
            lookups=[o.kind for o in self._memory if not isinstance(o, Answer)],
            pending_question=self._pending_question,
            next_action=self._next_action(),
            decision=self._decision,
            refund=self._refund,
            held=self._phase == "held_before_refund",
            queued_messages=len(self._inbox),
            escalation_round=self._open_round(),
            taken_over_by=self._taken_over,
        )

    def _open_round(self) -> int | None:
        """The round a click may answer now: posted, and not answered yet."""
        escalation = self._escalation
        return escalation.number if escalation and escalation.answer is None else None

    def _next_action(self) -> str:
        if self._phase == "closed":
            return "none: closed"
        if self._taken_over is not None:
            return f"wait for {self._taken_over.label} to hand the conversation back"
        if self._phase == "waiting_for_customer":
            return f"wait for the customer's answer to: {self._pending_question}"
        if self._phase in ("held_before_refund", "authorizing", "refunding"):
            return "issue refund"
        if self._phase == "waiting_for_approval":
            return "wait for a support agent's approval"
        return "decide next step"

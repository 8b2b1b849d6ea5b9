"""RefundConversation: one chat thread's refund conversation, as a durable agent loop.

    Signal(-with-start) -> decide: ask | look up | propose -> the refund rules dispose
        -> deny | refund | escalate -> Approve click -> hold? -> live grant read -> the refund

Everything non-deterministic is an Activity: short steps (the offline decider, the lookups, the
rules, the grant read) run as local activities, what waits on the outside world (the model, the
refund) as regular Activities; a post is tried once locally, then as an Activity. A step whose
dependency is down is retried quickly, then patiently: an outage delays a conversation, never
ends it. Where the conversation stands is in
its memo (MEMO_KEY), which /refund-status reads with no Worker alive (agent.history).
This is Workflow version 1.3 (agent/versions.py); docs/versioning.md says how a change ships.
"""

# The sandbox runs this module afresh for every conversation, so it declares no dataclass
# (agent.escalation) and keeps its annotations real objects (no `from __future__ import ...`).
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
        MEMO_KEY,
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

# A decider that never decides cannot loop for ever (and the model's history stays bounded).
MAX_TURNS = 10
KNOWN_QUESTIONS = frozenset({"order_number", "item_opened", "damage"})
# The lookups a decider may ask for, by name; their arguments come from the conversation.
LOOKUPS: dict[str, Callable[..., Awaitable[Any]]] = {
    "lookup_order": LookupActivities.lookup_order,
    "lookup_customer_history": LookupActivities.lookup_customer_history,
    "check_refund_policy": LookupActivities.check_refund_policy,
}
# A flood of messages cannot grow workflow state without end (agent.intake.MAX_SEEN_IDS too).
MAX_QUEUED_MESSAGES = 20

# A step's own retries, within Timing.quick_retry: most failures of a store or an API pass fast.
QUICK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=5), maximum_attempts=3
)
# Then, the thread told it waits, for Timing.outage_patience: at most one attempt in five minutes.
PATIENT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5), maximum_interval=timedelta(minutes=5)
)
# A chat platform that is down keeps the message: the post is retried for up to a day.
POST_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(minutes=1)
)
SHORT_STEP_TIMEOUT = timedelta(seconds=10)
MODEL_STEP_TIMEOUT = timedelta(seconds=60)
REFUND_STEP_TIMEOUT = timedelta(minutes=1)
# Activities that wait on the outside world heartbeat every second: a dead Worker's call is
# retried elsewhere within seconds.
HEARTBEAT_TIMEOUT = timedelta(seconds=4)
# The refund and the model's step cost something when called twice; a busy Worker may start them
# seconds after the server handed them over, so they get the workflow task's own 10 s.
COSTLY_CALL_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
# A post is first tried inside the workflow task that decided it; a platform slower than this, or
# failing, is left to the regular Activity and its day of retries.
LOCAL_POST_TIMEOUT = timedelta(seconds=5)
# A timer's summary names what it is for (no customer text): /refund-status shows the next one.
AGE_LIMIT = "close: the conversation's age limit"

T = TypeVar("T")


def idempotency_key_for(workflow_id: str, first_run_id: str) -> str:
    """One key per conversation: stable across retries, crashes and Continue-As-New, new when the
    Workflow ID is reused for another conversation."""
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
    """A local activity that fails with an ActivityError, as a regular one does, on its first run
    and on replay alike (the SDK raises its ApplicationError, or a bare TimeoutError on replay)."""
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
    """A failure no retry can fix (the Activity raised a non-retryable error); anything else is an
    outage to wait out."""
    return err.retry_state == RetryState.NON_RETRYABLE_FAILURE


def _nothing_usable(step: AgentStep, why: str) -> AgentStep:
    """A decision of nothing: the rules and a person decide."""
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
        # EXECUTION STATE: rebuilt by replay after a crash. Taken here, not in run(), because
        # signal-with-start delivers its Signal before run() begins.
        self._start = start
        self._timing = start.timing
        self._memory: list[Observation] = []
        self._phase: Phase = "deciding"
        self._pending_question: str | None = None
        self._decision: Disposition | None = None
        self._model_note: str | None = None  # the live model's summary, for staff only
        self._refund: RefundResult | None = None
        self._outcome: ConversationOutcome | None = None
        self._seq = 0
        # Signals land here in arrival order; the loop takes them when it is ready for them.
        self._inbox: list[CustomerMessage] = []
        self._approvals: list[Approval] = []
        self._seen_ids: list[str] = [start.opening_message_id]
        self._messages = 0  # customer messages delivered, taken or not
        self._decide_calls = 0
        self._released = False
        # Escalation rounds: each post of Approve / Deny opens one; a click answers one round.
        self._round = 0
        self._escalation: EscalationRound | None = None  # the latest round
        self._settled: dict[int, MessageEdit] = {}  # round -> the edit that says what happened
        self._stage: str | None = None  # what /refund-queue reads (RefundBotStage)
        # A person who took the conversation over: the agent stays quiet, and what the customer
        # writes meanwhile waits here, in order, until it is handed back.
        self._taken_over: Actor | None = None
        self._taken_over_at: str | None = None
        self._held: list[CustomerMessage] = []
        self._told_waiting = False  # the thread knows a step waits out an outage
        self._deadline: str | None = None  # the running wait's timer and what it is for
        self._recorded: ConversationView | None = None
        # The key the decide step posts its question under (1.1 on); None: the Workflow posts it.
        self._question_key: MessageKey | None = None
        # A conversation 1.0's code ran keeps 1.0's commands (agent.versions.PATCHES, marker=False).
        self._on_1_0 = False
        self._order_rule: OrderRule = "first"  # how the customer's words name the order

    # ------------------------------------------------------------------------------------------
    # The loop
    # ------------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: ConversationStart) -> ConversationOutcome:
        self._record_version()
        self._record()
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
            # A step failed for good: said in the thread, and the run fails for an operator.
            await self._say_failed(err)
            raise

    def _record_version(self) -> None:
        """RefundBotVersion names the code that ran this conversation's first task: set when the
        starter left it out, corrected when it names another version (a split deploy)."""
        recorded = workflow.info().typed_search_attributes.get(VERSION_ATTRIBUTE)
        corrected = recorded is not None and recorded != WORKFLOW_VERSION
        if corrected and not workflow.patched("version-in-first-task"):
            corrected = False  # replaying 1.1's first task, which left a value as it was
        # "1.0" left as it is: 1.0's code ran this task (or 1.1's from a 1.0 starter, see _decide).
        self._on_1_0 = recorded == "1.0" and not corrected
        if recorded is None or corrected:
            workflow.upsert_search_attributes([VERSION_ATTRIBUTE.value_set(WORKFLOW_VERSION)])

    def _has(self, change: str) -> bool:
        """Whether this conversation takes `change`, one 1.1 made without a marker."""
        return not self._on_1_0

    def _record(self) -> None:
        """EXECUTION STATE for readers: where the conversation stands, in its memo, written when it
        changed. The memo goes through the payload codec like any payload (encrypted)."""
        if not workflow.patched("status-in-memo"):
            return  # started before 1.3: its status shows once it ends
        view = self.view()
        if view != self._recorded:
            self._recorded = view
            workflow.upsert_memo({MEMO_KEY: view})

    async def _agent_loop(self, start: ConversationStart) -> AgentStep:
        """Turns of the decider until it proposes a decision (or gives nothing usable)."""
        asked_on = workflow.info().workflow_start_time.date()
        # From 1.2 a number named as the order wins and amounts are never one.
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
            self._decide_calls += 1
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
            # The offline policy is pure and quick: a local step, its result recorded.
            # From 1.1 the step posts the question it asks under a key taken now: a turn is one
            # local step (docs/benchmarks.md); a try that fails is posted by _ask, under that key.
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
        # MODEL CALL: recorded once in Event History; replay returns it without calling again.
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
        self._decision = decision
        self._model_note = (
            step.rationale if step.action == "decide" and step.source != "policy" else None
        )
        return decision

    async def _ask(self, step: AgentStep) -> Answer:
        """The customer's answer to the step's question (a person may hold the conversation
        meanwhile: what the customer wrote to them answers it once it is handed back)."""
        if step.question_id not in KNOWN_QUESTIONS:
            await self._fail(
                f"the agent asked an unknown question: {step.question_id}", "UnknownQuestion"
            )
        question = step.question or ""
        self._phase, self._pending_question = "waiting_for_customer", question
        if step.posted is None:  # asked by the model, by 1.0, or the decide step's try failed
            await self._post("question", question, tried=self._question_key)
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
        reminders = self._has("reminders")  # 1.0: one wait of customer_idle, then closed
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
        """DURABLE WAIT: while a person has the conversation, the agent says and decides nothing,
        until it is handed back or the conversation's age ends it."""
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
        """Post a new escalation round with Approve / Deny and return the click that answers it;
        `settled` says, in the previous round's message, what became of its click."""
        self._round += 1  # EXECUTION STATE: clicks are bound to this round
        previous = self._escalation
        self._phase = "waiting_for_approval"
        posted = await self._post(
            "escalation", text, actions=["approve", "deny"], round=self._round
        )
        # The buttons are up: a click on them counts from now on.
        self._escalation = EscalationRound(
            number=self._round, key=self._key(), text=text, message_id=posted.platform_message_id
        )
        self._queued(WAITING_FOR_APPROVAL)
        if previous is not None and settled is not None:
            await self._settle(previous, settled)
        return await self._next_approval()

    async def _next_approval(self) -> Approval:
        """The click that answers the open round: the approvers reminded once, then closed past
        the approval timeout. While a person holds the conversation the clock stops; a click
        still counts meanwhile."""
        timing = self._timing
        posted_at = workflow.now()
        # 1.0: one wait until approval_timeout, then closed.
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
                # An earlier round's button, or a second click on this one: not a fresh decision.
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
        """What /refund-queue reads, in visibility: waiting for a decision (order, amount, since
        when), or no longer. Only changes are written."""
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
        # DEMO HOOK + DURABLE WAIT: the crash drill lands here every time.
        await self._post(
            "info",
            f"Refund of {money(order.amount_cents)} approved. Holding before the refund for the "
            "demo: a presenter releases it with /refund-release.",
        )
        self._phase = "held_before_refund"
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
        # AUTHORIZATION STATE: read live, never cached; a local step in the very task that then
        # schedules issue_refund, so a recorded "allowed" only ever precedes its own refund.
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
            # The owner's own words stay in Event History and the log.
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
        """Wait until `ready`, for `at_most` and never past WAITS_END_AT_AGE; False if time ran
        out. The timer's summary says what it is for (/refund-status shows it)."""
        age_left = workflow.info().workflow_start_time + WAITS_END_AT_AGE - workflow.now()
        if age_left < at_most:
            at_most, summary = age_left, AGE_LIMIT
        at_most = max(at_most, timedelta())
        self._deadline = f"{summary} at {workflow.now() + at_most:%Y-%m-%d %H:%M:%S} UTC"
        self._record()
        try:
            await workflow.wait_condition(ready, timeout=at_most, timeout_summary=summary)
        except TimeoutError:
            return ready()
        finally:
            self._deadline = None
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
        self._record()
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
        """Wait a dependency's outage out: the thread told once, the step retried with backoff
        for Timing.outage_patience as a regular Activity, whose attempts and last failure the
        server shows (/refund-status reads them with no Worker alive)."""
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
        self._record()
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
        """`tried`: the key the decide step already tried this message under (no second try: the
        Activity posts it under that key)."""
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
        self._record()
        if tried is None:
            try:
                # EXTERNAL EFFECT: the post, tried once inside this workflow task: a turn is one
                # task, not two (docs/benchmarks.md, "Turn latency").
                return await _local_activity(
                    NotifyActivities.post_to_thread,
                    message,
                    start_to_close=LOCAL_POST_TIMEOUT,
                    retry_policy=RetryPolicy(maximum_attempts=1),
                )
            except ActivityError:
                pass  # slow or down: the Activity below retries (the key finds a try that posted)
        # EXTERNAL EFFECT: a chat message, posted at most once per stable key.
        return await workflow.execute_activity_method(
            NotifyActivities.post_to_thread,
            message,
            # A platform may hold one post for minutes (Slack honours Retry-After inside the
            # call); the heartbeat still notices a dead Worker in seconds.
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
        """Edit an escalation to say what became of it. Once per round."""
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
            # The outcome was said in the thread already; an edit that fails must not undo that.
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
        self._outcome = ConversationOutcome(
            status=status, message=text, refund=refund, detail=detail
        )
        await self._post("outcome", text)
        if settled is not None:
            await self._settle(self._escalation, settled)
        if self._inbox:
            # Messages this run never read as answers: the router saw a running conversation and
            # signalled it, so the answer the router gives is this one's to give.
            await self._post("info", FINISHED)
        self._record()
        return self._outcome

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
        self._record()

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

    # No validator: an Update rejects nothing the Signal would take, and returns once recorded.
    @workflow.update(name=MESSAGE_UPDATE)
    def customer_message_now(self, message: CustomerMessage) -> None:
        """The customer's message as an Update: the server hands it to a polling Worker at once.
        A Worker without this handler rejects it, and the router sends the Signal instead."""
        self._take_message(message)

    def _take_message(self, message: CustomerMessage) -> None:
        # A message delivered both ways (an Update not accepted in time, then its Signal) is
        # taken once, by its id (agent/intake.py).
        self._messages += 1
        if not remember(self._seen_ids, message.message_id):
            return  # a platform retry or a reconnect replay: applied once
        if not from_customer(message, self._start.customer):
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
        the customer wrote meanwhile is taken in order at the hand-back, so it answers the
        question it was waiting for. Approvals still count while it is taken over."""
        if change.taken == (self._taken_over is not None) or self._phase == "closed":
            return  # already so: a repeated command
        self._taken_over = change.actor if change.taken else None
        self._taken_over_at = f"{workflow.now():%Y-%m-%d %H:%M} UTC" if change.taken else None
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
            decision=self._decision.outcome if self._decision else None,
            refund=self._refund,
            held=self._phase == "held_before_refund",
            queued_messages=len(self._inbox),
            escalation_round=self._open_round(),
            taken_over_by=self._taken_over,
            thread=self._start.thread,
            order=self._order(),
            disposition=self._decision,
            model_note=self._model_note,
            next_deadline=self._deadline,
            taken_over_since=self._taken_over_at,
            customer_messages=self._messages,
            decide_calls=self._decide_calls,
            outcome=self._outcome,
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
        if self._phase == "refunding":
            return "issue refund (in flight)"
        if self._phase in ("held_before_refund", "authorizing"):
            return "issue refund"
        if self._phase == "waiting_for_approval":
            return "wait for a support agent's approval"
        return "decide next step"

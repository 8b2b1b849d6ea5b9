"""The values that cross the Event History boundary.

Everything a Workflow passes to an Activity, receives from one, or takes in a Signal is one of these
pydantic models. Temporal records each of them in Event History, so they are kept small, typed and
free of secrets (keys live in settings, read inside Activities).
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Platform = Literal["local", "slack", "discord"]

# A customer's message is cut to this many characters before it becomes working memory. The chat
# adapters cut earlier (bot.conversations.MAX_SIGNAL_TEXT); the Workflow cuts again because a Signal
# can come from anywhere that can reach Temporal.
MAX_TEXT_CHARS = 2000


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class ThreadRef(_Frozen):
    """Where a conversation lives: one chat thread is one conversation."""

    platform: Platform
    workspace: str  # Slack team id, Discord guild id, "local"
    channel: str  # Slack channel id, Discord parent channel id, local channel name
    thread: str  # Slack thread_ts of the root message, Discord thread id, local thread id


class Actor(_Frozen):
    """A person (or the agent's service principal) as one platform knows them."""

    platform: Platform | Literal["agent"]
    user_id: str
    display_name: str = ""

    @property
    def label(self) -> str:
        return self.display_name or self.user_id


# The agent's own service principal: auto-approved refunds are authorized against its grant.
AGENT_PRINCIPAL = Actor(platform="agent", user_id="refund-bot", display_name="refund-bot")


class Timing(_Frozen):
    """How long a conversation waits, and when it speaks up: settings (agent.settings), recorded
    with the conversation at its start so that replay never reads a changed setting. Every wait
    also ends by agent.versions.WAITS_END_AT_AGE, and the life these allow must fit in the window
    (agent.lifetime)."""

    # A silent customer: one reminder in the thread, then the request is closed.
    customer_reminder: timedelta = timedelta(days=1)
    customer_idle: timedelta = timedelta(days=3)
    # An escalation nobody decides: the approvers reminded once, then the request is closed.
    approval_reminder: timedelta = timedelta(hours=1)
    approval_timeout: timedelta = timedelta(days=7)
    # The presenter's hold before the refund, if no /refund-release comes.
    hold_timeout: timedelta = timedelta(hours=1)
    # A step whose dependency fails: its own quick retries for this long, then the thread is told
    # the request waits on something on our side, and the step is retried with backoff for
    # outage_patience more before the conversation gives up.
    quick_retry: timedelta = timedelta(seconds=30)
    outage_patience: timedelta = timedelta(hours=6)


class ConversationStart(BaseModel):
    """The Workflow's input: the thread, its customer and the message that opened it."""

    thread: ThreadRef
    customer: Actor
    opening_message_id: str
    opening_text: str = Field(max_length=MAX_TEXT_CHARS)
    # DEMO HOOK: wait for a `release` Signal right before the refund, so a presenter's crash lands
    # at the same point every time. A real deployment leaves it off and recovers the same way.
    hold_before_refund: bool = False
    # Recorded at start, so a replacement Worker never switches deciders mid-conversation.
    decider: Literal["policy", "openai"] = "policy"
    timing: Timing = Timing()


class CustomerMessage(BaseModel):
    """Signal: a message posted in the conversation's thread."""

    message_id: str
    author: Actor
    text: str


class Approval(BaseModel):
    """Signal: a support agent's Approve or Deny click on an escalation."""

    decision: Literal["approve", "deny"]
    actor: Actor
    click_id: str
    # The escalation round whose buttons were clicked (OutboundMessage.round). None from buttons
    # posted before rounds existed: such a click counts for the round open when it arrives.
    round: int | None = None


class Takeover(BaseModel):
    """Signal: a support agent takes the conversation over (/refund-takeover) or hands it back
    (/refund-handback). While it is taken over the agent says nothing; approvals still count."""

    actor: Actor
    taken: bool  # True: taken over; False: handed back


# ---------------------------------------------------------------------------------------------
# Working memory: what the decide step sees on every turn. Observations only, never the model's
# own prose, so it stays small and bounded by MAX_TURNS.
# ---------------------------------------------------------------------------------------------

QuestionId = Literal["order_number", "item_opened", "damage"]


class OwnerRefund(_Frozen):
    """One refund as the effect's owner (the offline ledger or Stripe) records it."""

    refund_id: str
    payment_ref: str
    amount_cents: int
    status: str  # the owner's word: succeeded | pending | ...
    refunded_on: str  # ISO date, from the owner's record
    workflow_id: str | None = None  # the conversation that made it, when the owner knows


class OrderDetails(_Frozen):
    order_number: str
    item: str
    amount_cents: int
    currency: str
    status: str  # fulfilment, from the domain store: delivered | shipped
    purchased_at: str
    final_sale: bool
    payment_ref: str  # Stripe PaymentIntent id (or the offline ledger's stand-in)
    # Read from the effect's owner at lookup time, never from the domain store: the refunds made
    # on this order's payment, oldest first. Empty: not refunded.
    refunds: list[OwnerRefund] = Field(default_factory=list)


class CustomerHistory(_Frozen):
    customer_id: str
    display_name: str
    tenure_days: int
    orders: int
    # The refunds the effect's owner holds on this customer's orders, the agent's own included,
    # one line each ("2025-07-17, order 1001 (laptop stickers), $18.00, re_…"): the most recent
    # ones only, so working memory stays bounded for a customer with many refunds.
    prior_refunds: list[str]
    # How many there are in all. None in histories recorded before it existed: len(prior_refunds).
    prior_refund_count: int | None = None
    # The first refund of each refunded order, by order number: read after the order lookup, so
    # a refund another conversation made in between is seen here (empty in older histories).
    refunded_orders: dict[str, OwnerRefund] = Field(default_factory=dict)

    @property
    def refund_count(self) -> int:
        if self.prior_refund_count is None:
            return len(self.prior_refunds)
        return self.prior_refund_count


class PolicyCheck(_Frozen):
    order_number: str
    eligible: bool
    return_required: bool
    reason: str


class Answer(_Frozen):
    kind: Literal["answer"] = "answer"
    question_id: QuestionId
    text: str
    message_id: str


class OrderLookup(_Frozen):
    kind: Literal["lookup_order"] = "lookup_order"
    order_number: str
    # None when the order does not exist *or* belongs to another customer: both look the same.
    order: OrderDetails | None


class HistoryLookup(_Frozen):
    kind: Literal["lookup_customer_history"] = "lookup_customer_history"
    history: CustomerHistory | None


class PolicyLookup(_Frozen):
    kind: Literal["check_refund_policy"] = "check_refund_policy"
    policy: PolicyCheck | None


Observation = Annotated[
    Answer | OrderLookup | HistoryLookup | PolicyLookup, Field(discriminator="kind")
]


# How a conversation reads the order in the customer's words: "named" (agent/order_numbers.py),
# or "first", the first standalone number, as conversations started before Workflow 1.2 do.
OrderRule = Literal["named", "first"]


class DecideInput(BaseModel):
    opening_text: str
    memory: list[Observation]
    turn: int
    decider: Literal["policy", "openai"] = "policy"
    # The conversation's OrderRule, so the decider reads the order number as the Workflow does.
    order_rule: OrderRule = "named"
    # The day the conversation opened (the refund window counts to it). None in inputs recorded
    # before it existed: the decider reads today's date.
    asked_on: date | None = None
    # Where the step posts the question it decides to ask (the offline policy's path); None: the
    # Workflow posts it.
    post_question: QuestionPost | None = None


class QuestionPost(BaseModel):
    """The decide step's post of the question it asks, so that asking takes one local step: the
    key is the one the Workflow's own post would have had, so either post finds the other."""

    thread: ThreadRef
    key: MessageKey
    # The post's one try; a platform slower than this is left to the Workflow's post.
    within_seconds: float


class AgentStep(_Frozen):
    """One turn's choice: ask the customer, run one lookup, or decide."""

    action: Literal["ask", "lookup", "decide"]
    question_id: str | None = None  # validated by the Workflow, not trusted
    question: str | None = None
    tool: str | None = None  # validated by the Workflow, not trusted
    # Lookups the Workflow runs at the same time as `tool`: reads that do not depend on each other
    # (the order and the customer's history). Validated like `tool`; a step recorded before has
    # none.
    parallel_tools: tuple[str, ...] = ()
    outcome: Literal["approve", "escalate", "deny"] | None = None
    rationale: str = ""
    source: str = "policy"
    # The question, posted by the step itself (DecideInput.post_question); None when it was not
    # asked to, or its try failed and the Workflow posts it.
    posted: PostedMessage | None = None
    # How many times a live model was asked again in this step for an unusable answer.
    model_retries: int = 0

    @property
    def summary(self) -> str:
        """What the step chose, for a log line: its question, its lookups, or its outcome."""
        lookups = "+".join(t for t in (self.tool, *self.parallel_tools) if t)
        return self.question_id or lookups or self.outcome or ""


# ---------------------------------------------------------------------------------------------
# The refund rules' answer to a decider's proposal (agent/rules.py): what the Workflow acts on.
# ---------------------------------------------------------------------------------------------

Outcome = Literal["approve", "escalate", "deny"]
RuleId = Literal[
    "no_order_number",
    "unknown_order",  # not found, or another customer's: both read the same
    "already_refunded",
    "final_sale",
    "not_delivered",
    "outside_refund_window",
    "history_unknown",
    "over_agent_limit",
    "prior_refunds",
    "eligible",
]


class Disposition(_Frozen):
    """What the Workflow does: the decider's proposal, disposed of by the rules."""

    outcome: Outcome
    rule: RuleId  # the rule that decided (for the log and /refund-status)
    reason: str  # the agent's own sentence
    proposal: Outcome | None  # what the decider proposed; None: nothing usable
    decider: str  # "policy", "openai:<model>", ...

    @property
    def overruled(self) -> bool:
        return self.proposal != self.outcome

    @property
    def summary(self) -> str:
        """One line for a log or /refund-status: who proposed what and what the rules made of it."""
        proposed = self.proposal or "nothing usable"
        if not self.overruled:
            return f"{self.decider} proposed {proposed}; the rules agree ({self.rule})"
        return f"{self.decider} proposed {proposed}; rule {self.rule} made it {self.outcome}"


class RulesInput(BaseModel):
    """apply_refund_rules' input: the proposal and the owner's records this conversation read."""

    proposal: Outcome | None
    decider: str
    order_number: str | None
    order: OrderLookup | None
    history: HistoryLookup | None
    asked_on: date  # the day the conversation opened: the refund window counts to it


class LookupOrderInput(BaseModel):
    order_number: str
    customer: Actor


class LookupCustomerInput(BaseModel):
    customer: Actor


class PolicyInput(BaseModel):
    order_number: str
    customer: Actor
    asked_on: date | None = None  # the day the conversation opened; None: today


# ---------------------------------------------------------------------------------------------
# Authorization and the effect.
# ---------------------------------------------------------------------------------------------

Role = Literal["refund_approver", "refund_agent", "presenter", "admin"]


class AuthorizeInput(BaseModel):
    principal: Actor
    role: Role
    amount_cents: int
    workflow_id: str


class AuthorizationDecision(BaseModel):
    allowed: bool
    principal: Actor
    role: Role
    reason: str
    grant_id: int | None = None
    limit_cents: int | None = None


class RefundRequest(BaseModel):
    """The one external effect's input. The idempotency key is derived by the Workflow."""

    idempotency_key: str
    workflow_id: str
    order_number: str
    payment_ref: str
    amount_cents: int
    currency: str


# RefundResult.status when the owner refused because the payment had already been refunded under
# another key (another conversation won the race): no refund was made by this conversation.
ALREADY_REFUNDED = "already_refunded"


class RefundResult(BaseModel):
    refund_id: str  # with already_refunded: the earlier refund's id
    status: str  # the owner's word: succeeded | pending | failed; or already_refunded
    amount_cents: int
    idempotency_key: str
    mode: Literal["ledger", "stripe"]
    attempt: int
    # With already_refunded: the owner's record of the refund made before this one was asked for.
    earlier: OwnerRefund | None = None


# ---------------------------------------------------------------------------------------------
# Outbound: what the agent says in the thread.
# ---------------------------------------------------------------------------------------------

MessageKind = Literal["question", "info", "escalation", "outcome"]
Mention = Literal["approvers"]


class MessageKey(_Frozen):
    """A post's stable identity, so a retried post_to_thread finds its earlier post."""

    workflow_id: str
    run_id: str
    seq: int

    def __str__(self) -> str:
        return f"{self.workflow_id}/{self.run_id}/{self.seq}"


class OutboundMessage(BaseModel):
    thread: ThreadRef
    key: MessageKey
    kind: MessageKind
    text: str
    # Escalations carry Approve / Deny; the platform renders them as buttons (or numbered choices)
    # whose ids name the conversation, so a click routes back without any lookup table.
    actions: list[Literal["approve", "deny"]] = Field(default_factory=list)
    # The escalation round these buttons answer; the platform puts it in each button, so a click
    # names the round it was made on (None: posted before rounds existed).
    round: int | None = None
    # Whom the platform mentions with it: the refund approvers (their Slack user group or Discord
    # role, where one is configured), in a reminder of an escalation nobody has decided.
    mention: Mention | None = None


class PostedMessage(BaseModel):
    platform_message_id: str
    duplicate: bool  # True when the key had already been posted (a retried Activity)
    # What was posted, echoed by post_to_thread: a post tried as a local activity leaves only its
    # result in Event History, which must still say what the agent said. None in results before.
    message: OutboundMessage | None = None


class MessageEdit(BaseModel):
    """Replace an earlier post (an escalation) with its own text and what became of it.

    The buttons go. The platform renders the outcome line itself, so that it can name the person
    who clicked its own way (a Slack mention, a Discord display name).
    """

    thread: ThreadRef
    key: MessageKey  # the earlier post's key
    platform_message_id: str  # what post_to_thread returned for it
    text: str  # the earlier post's text, kept
    outcome: str  # what happened: "refund issued (…)", "not counted (…)", ...
    decision: Literal["approve", "deny"] | None = None  # None: nobody's click was taken
    decided_by: Actor | None = None

    def outcome_line(self, who: str | None = None) -> str:
        """'Approved by <who>: <outcome>', or the outcome alone when no click was taken."""
        if self.decision is None or self.decided_by is None:
            return self.outcome[:1].upper() + self.outcome[1:]
        verb = "Approved" if self.decision == "approve" else "Denied"
        return f"{verb} by {who or self.decided_by.label}: {self.outcome}"


# ---------------------------------------------------------------------------------------------
# What the outside world reads back.
# ---------------------------------------------------------------------------------------------

Phase = Literal[
    "deciding",
    "waiting_for_customer",
    "looking_up",
    "waiting_for_approval",
    "held_before_refund",
    "authorizing",
    "refunding",
    "closed",
]


OutcomeStatus = Literal["refunded", "denied", "declined", "expired", "failed"]


class ConversationOutcome(BaseModel):
    status: OutcomeStatus
    message: str  # what the customer was told
    refund: RefundResult | None = None
    detail: str | None = None  # for operators: why it failed (never shown to the customer)


# The memo key under which the Workflow records its ConversationView (agent.history reads it).
MEMO_KEY = "conversation"


class ConversationView(BaseModel):
    """Where a conversation stands: the `view` Query's answer, and the Workflow's memo, which
    /refund-status reads with no Worker alive. The memo is encrypted by the payload codec."""

    workflow_id: str
    phase: Phase
    customer: Actor
    answers: dict[str, str]
    lookups: list[str]
    pending_question: str | None
    next_action: str
    decision: str | None
    refund: RefundResult | None
    held: bool
    queued_messages: int
    # The round whose buttons a click may answer now; None when no escalation is waiting.
    escalation_round: int | None = None
    taken_over_by: Actor | None = None
    thread: ThreadRef | None = None
    order: OrderDetails | None = None
    disposition: Disposition | None = None  # the refund rules' answer to the proposal
    model_note: str | None = None  # the live model's summary of its proposal: staff only
    next_deadline: str | None = None  # the running wait's timer: what for, and when
    taken_over_since: str | None = None
    customer_messages: int = 0  # delivered, taken or not
    decide_calls: int = 0
    outcome: ConversationOutcome | None = None

"""What a conversation records for Temporal's visibility: searchable, never customer text.

    the Workflow -> upsert_search_attributes -> `temporal workflow list --query ...`, the Web UI,
        the Worker's start (its version), /refund-queue (escalations waiting)

Custom search attributes must be registered on the namespace before a Workflow sets them (a task
that sets an unknown one fails). refund-bot registers SEARCH_ATTRIBUTES on the server it embeds and
on the tests' dev servers; docs/versioning.md gives the command for Temporal Cloud or a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

# The Workflow version whose code started the conversation (agent/versions.py).
VERSION_ATTRIBUTE = SearchAttributeKey.for_keyword("RefundBotVersion")
# An escalation waiting for a support agent, for /refund-queue: set while it waits, and changed
# when it is decided. The order number and its amount come from the domain store, not the customer.
STAGE = SearchAttributeKey.for_keyword("RefundBotStage")
ORDER = SearchAttributeKey.for_keyword("RefundBotOrder")
AMOUNT_CENTS = SearchAttributeKey.for_int("RefundBotAmountCents")
WAITING_SINCE = SearchAttributeKey.for_datetime("RefundBotWaitingSince")
APPROVERS_REMINDED = SearchAttributeKey.for_bool("RefundBotApproversReminded")
# The stage of a conversation whose escalation waits for a decision.
WAITING_FOR_APPROVAL = "waiting_for_approval"

SEARCH_ATTRIBUTES: tuple[SearchAttributeKey, ...] = (
    VERSION_ATTRIBUTE,
    STAGE,
    ORDER,
    AMOUNT_CENTS,
    WAITING_SINCE,
    APPROVERS_REMINDED,
)


def dev_server_args() -> list[str]:
    """SEARCH_ATTRIBUTES as `temporal server start-dev` flags."""
    kinds = {
        "KEYWORD": "Keyword",
        "INT": "Int",
        "DATETIME": "Datetime",
        "TEXT": "Text",
        "BOOL": "Bool",
    }
    return [
        arg
        for key in SEARCH_ATTRIBUTES
        for arg in ("--search-attribute", f"{key.name}={kinds[key.indexed_value_type.name]}")
    ]


class SearchAttributesMissing(Exception):
    """The namespace lacks refund-bot's search attributes: the first conversation that sets one
    would fail its workflow task. One line that says what to run."""


async def check_registered(client: Client) -> None:
    """Raise SearchAttributesMissing unless the namespace knows every SEARCH_ATTRIBUTE (one
    visibility query that names them all: the server refuses a query with an unknown one)."""
    query = " AND ".join(f"{key.name} IS NULL" for key in SEARCH_ATTRIBUTES)
    try:
        await client.count_workflows(f"WorkflowType = 'none' AND {query}")
    except RPCError as err:
        if err.status != RPCStatusCode.INVALID_ARGUMENT:
            raise
        kinds = dev_server_args()[1::2]
        raise SearchAttributesMissing(
            f"namespace {client.namespace!r} lacks refund-bot's search attributes "
            f"({', '.join(kinds)}): register them once, e.g. `temporal operator search-attribute "
            f"create --namespace {client.namespace} "
            + " ".join(f"--name {k.split('=')[0]} --type {k.split('=')[1]}" for k in kinds)
            + "` (docs/versioning.md); refund-bot's embedded server registers them itself"
        ) from err


@dataclass(frozen=True)
class Waiting:
    """An escalation waiting for a support agent, as visibility lists it."""

    workflow_id: str
    order: str
    amount_cents: int
    since: datetime | None
    reminded: bool


async def escalations_waiting(
    client: Client, workflow_type: str = "RefundConversation"
) -> list[Waiting]:
    """Every open conversation whose escalation waits for a decision, oldest first. Visibility
    only: no Worker, no history read, no copy of the queue anywhere."""
    query = (
        f"WorkflowType = '{workflow_type}' AND ExecutionStatus = 'Running' AND "
        f"{STAGE.name} = '{WAITING_FOR_APPROVAL}'"
    )
    found = []
    async for execution in client.list_workflows(query):
        attributes = execution.typed_search_attributes
        found.append(
            Waiting(
                workflow_id=execution.id,
                order=attributes.get(ORDER) or "?",
                amount_cents=attributes.get(AMOUNT_CENTS) or 0,
                since=attributes.get(WAITING_SINCE),
                reminded=bool(attributes.get(APPROVERS_REMINDED)),
            )
        )
    oldest = datetime.max.replace(tzinfo=UTC)
    return sorted(found, key=lambda w: w.since or oldest)

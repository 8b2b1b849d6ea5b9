"""What a conversation records for Temporal's visibility: searchable, never customer text.

    the Workflow -> upsert_search_attributes -> `temporal workflow list --query ...`, the Web UI,
        the Worker's start (its version), /refund-queue (escalations waiting)

Custom search attributes must be registered on the namespace before a Workflow sets them (a task
that sets an unknown one fails). Every command that starts or reads conversations first calls
ensure_registered: it adds the missing ones through the operator API (the embedded server, any dev
server, a self-hosted cluster, an existing database too), and where the server refuses (Temporal
Cloud, no permission) it stops with one line naming them and the commands that register them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

log = logging.getLogger(__name__)

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


# How the Temporal CLI and tcld spell each type.
_TYPE_NAMES = {
    IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD: "Keyword",
    IndexedValueType.INDEXED_VALUE_TYPE_INT: "Int",
    IndexedValueType.INDEXED_VALUE_TYPE_DATETIME: "Datetime",
    IndexedValueType.INDEXED_VALUE_TYPE_TEXT: "Text",
    IndexedValueType.INDEXED_VALUE_TYPE_BOOL: "Bool",
}


def _kind(key: SearchAttributeKey) -> IndexedValueType.ValueType:
    return IndexedValueType.ValueType(int(key.indexed_value_type))


class SearchAttributesMissing(Exception):
    """The namespace lacks refund-bot's search attributes and they could not be added: the first
    conversation that sets one would fail its workflow task. One line that says what to run."""


def missing_line(
    namespace: str, missing: Sequence[SearchAttributeKey], why: str | None = None
) -> str:
    """The one line for a namespace without `missing`: each with its type, and the commands
    that register them all (a cluster's Temporal CLI, Temporal Cloud's tcld)."""
    named = ", ".join(f"{key.name} ({_TYPE_NAMES[_kind(key)]})" for key in missing)
    cli = " ".join(f"--name {key.name} --type {_TYPE_NAMES[_kind(key)]}" for key in missing)
    cloud = " ".join(f"--sa {key.name}={_TYPE_NAMES[_kind(key)]}" for key in missing)
    refused = f" and the server did not add them ({why.rstrip('.')})" if why else ""
    return (
        f"namespace {namespace!r} lacks refund-bot's search attributes {named}{refused}: "
        f"register them once with `temporal operator search-attribute create --namespace "
        f"{namespace} {cli}` (a cluster) or `tcld namespace search-attributes add -n {namespace} "
        f"{cloud}` (Temporal Cloud), then start refund-bot again (docs/versioning.md)"
    )


async def _missing(client: Client) -> list[SearchAttributeKey]:
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    return [key for key in SEARCH_ATTRIBUTES if key.name not in listed.custom_attributes]


async def ensure_registered(client: Client) -> list[str]:
    """Make sure the namespace knows every SEARCH_ATTRIBUTE before anything starts or reads a
    conversation: list them, add the missing ones, and return their names. Raises
    SearchAttributesMissing (one line) when they are missing and the server refuses to add them."""
    namespace = client.namespace
    try:
        missing = await _missing(client)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise SearchAttributesMissing(
                f"namespace {namespace!r} does not exist on this server: create it (`temporal "
                f"operator namespace create --namespace {namespace}`), or set TEMPORAL_NAMESPACE "
                "to one that does"
            ) from err
        # Not allowed to list (Temporal Cloud's API keys may not be): visibility tells.
        await check_registered(client)
        return []
    if not missing:
        return []
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace,
                search_attributes={key.name: _kind(key) for key in missing},
            )
        )
    except RPCError as err:
        # Another refund-bot process starting beside this one may have just added them.
        if await _missing(client):
            raise SearchAttributesMissing(missing_line(namespace, missing, err.message)) from err
        return []
    added = [key.name for key in missing]
    log.info("registered search attributes %s in namespace %s", ", ".join(added), namespace)
    return added


async def check_registered(client: Client) -> None:
    """Raise SearchAttributesMissing unless the namespace knows every SEARCH_ATTRIBUTE (one
    visibility query that names them all: the server refuses a query with an unknown one)."""
    query = " AND ".join(f"{key.name} IS NULL" for key in SEARCH_ATTRIBUTES)
    try:
        await client.count_workflows(f"WorkflowType = 'none' AND {query}")
    except RPCError as err:
        if err.status != RPCStatusCode.INVALID_ARGUMENT:
            raise
        raise SearchAttributesMissing(missing_line(client.namespace, SEARCH_ATTRIBUTES)) from err


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

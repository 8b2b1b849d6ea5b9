"""Which conversations this code runs: the Workflow's version, its open changes and their window.

    a conversation's first task -> RefundBotVersion = WORKFLOW_VERSION (a search attribute), set
        if the starter left it out and corrected if it named another version
    a Worker's start -> open conversations of a version not in SUPPORTED -> one line naming them

docs/versioning.md says how a change to the Workflow ships: guarded by workflow.patched, listed in
PATCHES with the day its release shipped, and removed once no open conversation can predate it
(MAX_CONVERSATION_AGE after that day: no conversation lives longer, agent.lifetime). The
release step (`python -m harness.release check`) fails when a patch outlives that window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from agent.visibility import VERSION_ATTRIBUTE, check_registered

# The version a conversation records when it starts: bumped with every release that changes the
# Workflow's commands. A new baseline (the major number) drops every branch older than it.
WORKFLOW_VERSION = "1.3"
# The versions whose conversations this code replays: the current baseline's releases. Each has its
# histories in tests/histories/workflow-<version>/, recorded by its own code, and its release tag.
SUPPORTED = ("1.0", "1.1", "1.2", "1.3")

# No conversation lives longer than this: the window after which no open conversation can predate
# a release. The server enforces it (each conversation's execution timeout, set by its starter),
# and the settings are checked at start-up to fit in it (agent.lifetime).
MAX_CONVERSATION_AGE = timedelta(days=30)
# Every wait (the customer, a support agent, the hold before the refund) ends by this age, and the
# conversation closes with a sentence; the rest of the window is for what may follow its last
# wait (a step riding out an outage, the outcome said).
WAITS_END_AT_AGE = timedelta(days=21)


@dataclass(frozen=True)
class Patch:
    """A change to the Workflow's commands, guarded until removed: by workflow.patched(id), or
    (marker=False, changes 1.1 shipped without a marker) by RefundConversation._has(id), which
    tells 1.0's conversations by the version they recorded."""

    version: str  # the WORKFLOW_VERSION that introduced it
    shipped: date  # the day its release replaced the last Worker running older code
    marker: bool = True

    def removable_after(self) -> date:
        """The day after which no open conversation can have started before this change."""
        return self.shipped + MAX_CONVERSATION_AGE


# Every workflow.patched id in the product's Workflows (agent/, worker/, demo/) and every change
# RefundConversation._has names, by id. Empty at a baseline.
PATCHES: dict[str, Patch] = {
    # A restart order expires: it names its host and is refused when older than ORDER_MAX_AGE
    # (worker.control.RestartWorker, demo.paused_restart.PausedRestartWorker).
    "restart-order-expires": Patch(version="1.1", shipped=date(2026, 12, 2)),
    # The offline policy's decide step posts the question it asks: one activation a turn fewer.
    "question-in-decide": Patch(version="1.1", shipped=date(2026, 12, 2)),
    # An escalation waiting for a decision is in visibility for /refund-queue (search attributes
    # upserted after its post and once decided).
    "approval-queue": Patch(version="1.1", shipped=date(2026, 12, 2), marker=False),
    # A silent customer and an undecided escalation are reminded once before they close.
    "reminders": Patch(version="1.1", shipped=date(2026, 12, 2), marker=False),
    # The first task corrects a RefundBotVersion the starter set to another version.
    "version-in-first-task": Patch(version="1.2", shipped=date(2026, 12, 4)),
    # A number named as the order wins over any other, and amounts are never one: read by the
    # Workflow (its lookups, the rules' input) as by the decider.
    "order-number-named": Patch(version="1.2", shipped=date(2026, 12, 4)),
    # Where the conversation stands is in its memo, for /refund-status with no Worker alive.
    "status-in-memo": Patch(version="1.3", shipped=date(2026, 12, 5)),
}


def overdue(patches: dict[str, Patch], today: date) -> list[str]:
    """The patches whose branch should be gone by `today` (docs/versioning.md: deprecate, then
    remove); the release step fails while any is left."""
    return sorted(
        patch_id for patch_id, patch in patches.items() if today > patch.removable_after()
    )


def unsupported_query(workflow_type: str) -> str:
    """The visibility query for open conversations this code does not replay."""
    versions = ", ".join(f"'{v}'" for v in SUPPORTED)
    return (
        f"WorkflowType = '{workflow_type}' AND ExecutionStatus = 'Running' AND "
        f"({VERSION_ATTRIBUTE.name} IS NULL OR {VERSION_ATTRIBUTE.name} NOT IN ({versions}))"
    )


@dataclass(frozen=True)
class Unsupported:
    """Open conversations this code does not replay: how many, and the first of them."""

    count: int
    workflow_ids: list[str]


async def unsupported_conversations(
    client: Client, workflow_type: str, *, limit: int = 20
) -> Unsupported:
    """Ask Temporal's visibility (no Worker, no history read) which open conversations started on
    a version not in SUPPORTED; raises SearchAttributesMissing when the namespace lacks
    refund-bot's search attributes."""
    await check_registered(client)
    query = unsupported_query(workflow_type)
    count = (await client.count_workflows(query)).count
    ids: list[str] = []
    if count:
        async for execution in client.list_workflows(query, limit=limit):
            ids.append(execution.id)
    return Unsupported(count=count, workflow_ids=ids)


def unsupported_line(found: Unsupported) -> str:
    """The Worker's one line about them, before it polls."""
    shown = ", ".join(found.workflow_ids)
    more = (
        f" and {found.count - len(found.workflow_ids)} more"
        if found.count > len(found.workflow_ids)
        else ""
    )
    return (
        f"{found.count} open conversation(s) started on a Workflow version this code does not run "
        f"(it runs {', '.join(SUPPORTED)}): {shown}{more}. Their next step fails until they are "
        "drained: `refund-bot conversations --unsupported` lists them, `--drain` closes each with "
        "a sentence in its thread (docs/versioning.md)"
    )


def version_attributes() -> TypedSearchAttributes:
    """What a starter sets on a new conversation: the version it expects to run it. The Workflow
    corrects it in its first task if the Worker's code is another version (a split deploy)."""
    return TypedSearchAttributes([SearchAttributePair(VERSION_ATTRIBUTE, WORKFLOW_VERSION)])

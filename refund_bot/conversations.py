"""`refund-bot conversations`: the open conversations by Workflow version; --drain closes those this
code does not run.

    visibility (RefundBotVersion) -> one line each -> --drain: the owner's word on a refund
        -> one sentence in the thread (a stable key: posted once) -> terminate

A conversation started on a version outside agent.versions.SUPPORTED cannot replay on this code:
its next workflow task fails. Draining ends it honestly: the customer reads what became of their
request (a refund the owner holds is said, never guessed), then Temporal terminates the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agent.activities.notify import ThreadPoster
from agent.effect_owner import refunds_at_owner
from agent.history import what_survives
from agent.models import MessageKey, OutboundMessage
from agent.settings import AgentSettings
from agent.versions import SUPPORTED, unsupported_query
from agent.visibility import VERSION_ATTRIBUTE
from agent.workflow import WORKFLOW_TYPE

# What the customer reads in a drained conversation's thread.
DRAINED = (
    "We upgraded our support agent and it could not carry on with this request, so nothing was "
    "refunded. Please post in the support channel to start a new one."
)
DRAINED_REFUNDED = (
    "We upgraded our support agent, so this conversation has ended. Your refund was made "
    "(reference {reference})."
)
# The drain's post is the conversation's own, under a sequence number the Workflow never uses.
DRAIN_SEQ = 0


@dataclass(frozen=True)
class Open:
    """An open conversation, as visibility lists it (ids and times only: no customer text)."""

    workflow_id: str
    run_id: str
    version: str | None  # None: started before versions were recorded
    started: datetime | None

    @property
    def runs_here(self) -> bool:
        return self.version in SUPPORTED

    def line(self) -> str:
        version = self.version or "before 1.0"
        started = self.started.isoformat(timespec="seconds") if self.started else "?"
        verdict = "runs on this code" if self.runs_here else "does NOT run on this code"
        return f"{self.workflow_id}  version {version}  started {started}  {verdict}"


async def open_conversations(client: Client, *, unsupported: bool = False) -> list[Open]:
    query = (
        unsupported_query(WORKFLOW_TYPE)
        if unsupported
        else f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'"
    )
    return [
        Open(
            workflow_id=execution.id,
            run_id=execution.run_id,
            version=execution.typed_search_attributes.get(VERSION_ATTRIBUTE),
            started=execution.start_time,
        )
        async for execution in client.list_workflows(query)
    ]


async def drain(
    client: Client,
    settings: AgentSettings,
    posters: dict[str, ThreadPoster],
    conversation: Open,
) -> str:
    """Close one conversation this code does not run; the line that says what was done."""
    survivors = await what_survives(client, conversation.workflow_id)
    thread = survivors.thread
    if thread is None:
        return f"{conversation.workflow_id}: its input cannot be read; left open"
    poster = posters.get(thread.platform)
    if poster is None:
        return (
            f"{conversation.workflow_id}: no {thread.platform} credentials in this process to "
            "post in its thread; left open (run it where they are set)"
        )
    payment_ref = survivors.order.payment_ref if survivors.order else None
    # Whether a refund was made is the owner's to say, not the conversation's history.
    owner = await refunds_at_owner(settings, conversation.workflow_id, payment_ref)
    text = DRAINED_REFUNDED.format(reference=owner.refund_ids[0]) if owner.refund_ids else DRAINED
    # EXTERNAL EFFECT: one post, under a stable key, so a second drain does not post twice.
    await poster.post(
        OutboundMessage(
            thread=thread,
            key=MessageKey(
                workflow_id=conversation.workflow_id, run_id=conversation.run_id, seq=DRAIN_SEQ
            ),
            kind="outcome",
            text=text,
        )
    )
    try:
        await client.get_workflow_handle(conversation.workflow_id).terminate(
            reason=f"drained: started on Workflow version {conversation.version or 'before 1.0'}; "
            f"this code runs {', '.join(SUPPORTED)}"
        )
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        return f"{conversation.workflow_id}: already closed (by another drain, or by itself)"
    said = "refund made, said so" if owner.refund_ids else "no refund, said so"
    return f"{conversation.workflow_id}: drained ({said} in its {thread.platform} thread)"

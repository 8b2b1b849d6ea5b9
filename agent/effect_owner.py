"""Did the refund happen? Asked of the effect's owner, never of memory or workflow state."""

from __future__ import annotations

from pydantic import BaseModel

from agent.settings import AgentSettings
from agent.stores.ledger import Ledger
from agent.stripe_client import stripe_client


class OwnerRecord(BaseModel):
    owner: str  # "offline ledger" | "Stripe test mode"
    refunds: list[str]  # one line per refund the owner holds for this conversation


async def refunds_at_owner(
    settings: AgentSettings, workflow_id: str, payment_ref: str | None
) -> OwnerRecord:
    if settings.stripe_api_key is None:
        refunds = await Ledger(settings.ledger_db).refunds_for_workflow(workflow_id)
        return OwnerRecord(
            owner="offline ledger",
            refunds=[
                f"{r.refund_id} {r.status} ${r.amount_cents / 100:,.2f} (calls with its key: "
                f"{r.calls})"
                for r in refunds
            ],
        )
    if payment_ref is None:  # the order was never looked up: nothing can have been refunded
        return OwnerRecord(owner="Stripe test mode", refunds=[])
    async with stripe_client(settings) as client:
        listed = await client.v1.refunds.list_async(
            params={"payment_intent": payment_ref, "limit": 100}
        )
    return OwnerRecord(
        owner="Stripe test mode",
        refunds=[
            f"{r.id} {r.status} ${r.amount / 100:,.2f}"
            for r in listed.data
            if r.metadata and r.metadata.to_dict().get("temporal_workflow_id") == workflow_id
        ],
    )

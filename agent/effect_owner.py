"""Did the refund happen, and which refunds were made? Asked of the effect's owner, never of a copy.

    lookups, issue_refund, /refund-status -> effect_owner(settings) -> the offline ledger | Stripe

The offline ledger owns the effect when no STRIPE_API_KEY is set; Stripe test mode owns it
otherwise. Nothing beside them records a refund, so the agent's own refunds are counted the moment
the owner has them, and a refund made by another conversation is seen by the next lookup.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel

from agent.models import OwnerRefund
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from agent.stores.ledger import Ledger
from agent.stripe_client import stripe_client

if TYPE_CHECKING:
    import stripe

# Refunds that gave (or are giving) money back. A failed or canceled refund refunded nothing.
COUNTED_STATUSES = frozenset({"succeeded", "pending", "requires_action"})
# How many payments one Stripe lookup asks about at once (Stripe lists refunds per PaymentIntent).
STRIPE_CONCURRENT_LISTS = 8


class EffectOwner(Protocol):
    """The system of record for refunds: the offline ledger or Stripe."""

    name: str

    async def refunds_of(self, payment_refs: Sequence[str]) -> list[OwnerRefund]:
        """The counted refunds of these payments, oldest first."""
        ...


class LedgerOwner:
    name = "offline ledger"

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    async def refunds_of(self, payment_refs: Sequence[str]) -> list[OwnerRefund]:
        return [
            OwnerRefund(
                refund_id=r.refund_id,
                payment_ref=r.payment_ref,
                amount_cents=r.amount_cents,
                status=r.status,
                refunded_on=r.created_at[:10],
                workflow_id=r.workflow_id or None,
            )
            for r in await self._ledger.refunds_for_payments(list(payment_refs))
            if r.status in COUNTED_STATUSES
        ]


class StripeOwner:
    name = "Stripe test mode"

    def __init__(self, settings: AgentSettings) -> None:
        self._settings = settings

    async def refunds_of(self, payment_refs: Sequence[str]) -> list[OwnerRefund]:
        if not payment_refs:
            return []
        gate = asyncio.Semaphore(STRIPE_CONCURRENT_LISTS)
        async with stripe_client(self._settings) as client:

            async def one(payment_ref: str) -> list[tuple[int, OwnerRefund]]:
                async with gate:
                    return await _stripe_refunds(client, payment_ref)

            per_payment = await asyncio.gather(*(one(ref) for ref in dict.fromkeys(payment_refs)))
        timed = sorted((t for listed in per_payment for t in listed), key=lambda t: t[0])
        return [refund for _, refund in timed]


async def _stripe_refunds(
    client: stripe.StripeClient, payment_ref: str
) -> list[tuple[int, OwnerRefund]]:
    """(created, refund) for each counted refund of one PaymentIntent."""
    import stripe  # only a Worker that has Stripe own the effect imports it

    try:
        listed = await client.v1.refunds.list_async(
            params={"payment_intent": payment_ref, "limit": 100}
        )
    except stripe.InvalidRequestError as err:
        if err.code == "resource_missing":
            # A payment Stripe never saw (an order stripe-setup has not paid) has no refunds there.
            return []
        raise
    refunds: list[tuple[int, OwnerRefund]] = []
    async for refund in listed.auto_paging_iter():
        if refund.status not in COUNTED_STATUSES:
            continue
        metadata = refund.metadata.to_dict() if refund.metadata else {}
        refunds.append(
            (
                refund.created,
                OwnerRefund(
                    refund_id=refund.id,
                    payment_ref=payment_ref,
                    amount_cents=refund.amount,
                    status=refund.status or "unknown",
                    refunded_on=datetime.fromtimestamp(refund.created, UTC).date().isoformat(),
                    workflow_id=metadata.get("temporal_workflow_id"),
                ),
            )
        )
    return refunds


def effect_owner(settings: AgentSettings, ledger: Ledger | None = None) -> EffectOwner:
    """The owner this deployment refunds with: Stripe when a key is set, the ledger otherwise."""
    if settings.stripe_api_key is not None:
        return StripeOwner(settings)
    return LedgerOwner(ledger or Ledger(database_for(settings)))


class OwnerRecord(BaseModel):
    owner: str  # "offline ledger" | "Stripe test mode"
    refunds: list[str]  # one line per refund the owner holds for this conversation
    refund_ids: list[str] = []  # the same refunds' ids, in the same order


async def refunds_at_owner(
    settings: AgentSettings, workflow_id: str, payment_ref: str | None
) -> OwnerRecord:
    """/refund-status: the refunds one conversation made, as the owner records them."""
    if settings.stripe_api_key is None:
        refunds = await Ledger(database_for(settings)).refunds_for_workflow(workflow_id)
        return OwnerRecord(
            owner=LedgerOwner.name,
            refunds=[
                f"{r.refund_id} {r.status} ${r.amount_cents / 100:,.2f} (calls with its key: "
                f"{r.calls})"
                for r in refunds
            ],
            refund_ids=[r.refund_id for r in refunds],
        )
    if payment_ref is None:  # the order was never looked up: nothing can have been refunded
        return OwnerRecord(owner=StripeOwner.name, refunds=[])
    made = [
        r
        for r in await StripeOwner(settings).refunds_of([payment_ref])
        if r.workflow_id == workflow_id
    ]
    return OwnerRecord(
        owner=StripeOwner.name,
        refunds=[f"{r.refund_id} {r.status} ${r.amount_cents / 100:,.2f}" for r in made],
        refund_ids=[r.refund_id for r in made],
    )

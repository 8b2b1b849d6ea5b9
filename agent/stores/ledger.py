"""The offline ledger: the stand-in for Stripe, and the owner of the effect when no key is set.

It behaves as Stripe's idempotent requests do: the same idempotency key with the same parameters
returns the same refund; the same key with other parameters is an error; a payment cannot be
refunded beyond what was paid.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from agent.stores.db import open_db

SCHEMA = """
CREATE TABLE IF NOT EXISTS payments (
    payment_ref TEXT PRIMARY KEY,
    amount_cents INTEGER NOT NULL,
    currency TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'succeeded'
);
CREATE TABLE IF NOT EXISTS refunds (
    refund_id TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL UNIQUE,
    payment_ref TEXT NOT NULL REFERENCES payments(payment_ref),
    amount_cents INTEGER NOT NULL,
    currency TEXT NOT NULL,
    status TEXT NOT NULL,
    workflow_id TEXT NOT NULL,
    order_number TEXT NOT NULL,
    created_at TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 1
);
"""


class LedgerRefund(BaseModel):
    refund_id: str
    idempotency_key: str
    payment_ref: str
    amount_cents: int
    currency: str
    status: str
    workflow_id: str
    order_number: str
    created_at: str
    calls: int


class IdempotencyConflict(Exception):
    """Same key, other parameters: Stripe answers 400 idempotency_error."""


class RefundRejected(Exception):
    """The owner refuses the refund itself (unknown payment, more than was paid)."""


class AlreadyRefunded(RefundRejected):
    """More than was paid, because refunds under other keys already took the payment: Stripe's
    charge_already_refunded. The refunds themselves are read with refunds_for_payments."""


class SeedRefund(BaseModel):
    """A refund the demo world made before this ledger existed (the demo customer's history)."""

    payment_ref: str
    amount_cents: int
    currency: str
    order_number: str
    refunded_on: str  # ISO date

    @property
    def idempotency_key(self) -> str:
        # The seed's `pi_demo_1001` gives `…-1001`; an order placed later carries its payment's
        # random suffix, so a new data directory reusing the number never reuses the key.
        return f"refund-bot-demo-refund-{self.payment_ref.removeprefix('pi_demo_')}"


def _refund_id(idempotency_key: str) -> str:
    return "re_ledger_" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:20]


class Ledger:
    def __init__(self, path: Path) -> None:
        self._path = path

    async def seed_payments(self, payments: list[tuple[str, int, str]]) -> None:
        async with open_db(self._path, SCHEMA) as db:
            await db.executemany(
                "INSERT OR IGNORE INTO payments (payment_ref, amount_cents, currency) "
                "VALUES (?, ?, ?)",
                payments,
            )
            await db.commit()

    async def create_refund(
        self,
        *,
        idempotency_key: str,
        payment_ref: str,
        amount_cents: int,
        currency: str,
        workflow_id: str,
        order_number: str,
    ) -> LedgerRefund:
        async with open_db(self._path, SCHEMA) as db:
            # One writer at a time from here to the commit, so two concurrent attempts with one
            # key cannot both insert.
            await db.execute("BEGIN IMMEDIATE")
            cursor = await db.execute(
                "SELECT * FROM refunds WHERE idempotency_key = ?", (idempotency_key,)
            )
            existing = await cursor.fetchone()
            if existing is not None:
                if (existing["payment_ref"], existing["amount_cents"], existing["currency"]) != (
                    payment_ref,
                    amount_cents,
                    currency,
                ):
                    await db.rollback()
                    raise IdempotencyConflict(
                        "Keys for idempotent requests can only be used with the same parameters "
                        "they were first used with."
                    )
                await db.execute(
                    "UPDATE refunds SET calls = calls + 1 WHERE idempotency_key = ?",
                    (idempotency_key,),
                )
                await db.commit()
                return LedgerRefund(**{**dict(existing), "calls": existing["calls"] + 1})

            cursor = await db.execute(
                "SELECT amount_cents, currency FROM payments WHERE payment_ref = ?", (payment_ref,)
            )
            payment = await cursor.fetchone()
            if payment is None:
                await db.rollback()
                raise RefundRejected(f"No such payment: {payment_ref}")
            cursor = await db.execute(
                "SELECT COALESCE(SUM(amount_cents), 0) FROM refunds WHERE payment_ref = ?",
                (payment_ref,),
            )
            (refunded,) = await cursor.fetchone()  # type: ignore[misc]
            if refunded + amount_cents > payment["amount_cents"]:
                await db.rollback()
                rejected = AlreadyRefunded if refunded else RefundRejected
                raise rejected(
                    f"Refund amount ({amount_cents}) is greater than unrefunded amount on "
                    f"payment ({payment['amount_cents'] - refunded})."
                )
            refund = LedgerRefund(
                refund_id=_refund_id(idempotency_key),
                idempotency_key=idempotency_key,
                payment_ref=payment_ref,
                amount_cents=amount_cents,
                currency=currency,
                status="succeeded",
                workflow_id=workflow_id,
                order_number=order_number,
                created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                calls=1,
            )
            await db.execute(
                "INSERT INTO refunds VALUES (:refund_id, :idempotency_key, :payment_ref, "
                ":amount_cents, :currency, :status, :workflow_id, :order_number, :created_at, "
                ":calls)",
                refund.model_dump(),
            )
            await db.commit()
            return refund

    async def seed_refunds(self, refunds: list[SeedRefund]) -> None:
        """Record the demo world's earlier refunds once (idempotent by their keys)."""
        async with open_db(self._path, SCHEMA) as db:
            await db.executemany(
                "INSERT OR IGNORE INTO refunds VALUES (?, ?, ?, ?, ?, 'succeeded', '', ?, ?, 1)",
                [
                    (
                        _refund_id(r.idempotency_key),
                        r.idempotency_key,
                        r.payment_ref,
                        r.amount_cents,
                        r.currency,
                        r.order_number,
                        f"{r.refunded_on}T12:00:00+00:00",
                    )
                    for r in refunds
                ],
            )
            await db.commit()

    async def refunds_for_payments(self, payment_refs: list[str]) -> list[LedgerRefund]:
        """Every refund of these payments, oldest first (in the order they were made)."""
        if not payment_refs:
            return []
        async with open_db(self._path, SCHEMA) as db:
            cursor = await db.execute(
                f"SELECT * FROM refunds WHERE payment_ref IN ({','.join('?' * len(payment_refs))}) "
                "ORDER BY created_at, rowid",
                payment_refs,
            )
            return [LedgerRefund(**dict(r)) for r in await cursor.fetchall()]

    async def refunds_for_workflow(self, workflow_id: str) -> list[LedgerRefund]:
        async with open_db(self._path, SCHEMA) as db:
            cursor = await db.execute(
                "SELECT * FROM refunds WHERE workflow_id = ? ORDER BY created_at", (workflow_id,)
            )
            return [LedgerRefund(**dict(r)) for r in await cursor.fetchall()]

    async def all_refunds(self) -> list[LedgerRefund]:
        async with open_db(self._path, SCHEMA) as db:
            cursor = await db.execute("SELECT * FROM refunds ORDER BY created_at")
            return [LedgerRefund(**dict(r)) for r in await cursor.fetchall()]

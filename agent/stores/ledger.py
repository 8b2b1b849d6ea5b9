"""The offline ledger: the stand-in for Stripe, and the owner of the effect when no key is set.

It behaves as Stripe's idempotent requests do: the same idempotency key with the same parameters
returns the same refund; the same key with other parameters is an error; a payment cannot be
refunded beyond what was paid. Both hold when refunds race, from any number of Workers: the unique
idempotency key decides which attempt made a refund, and a payment's row is locked while a new
refund of it is checked against what was paid.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from pydantic import BaseModel

from agent.stores.database import Connection, Database, Migration, Schema, both

SCHEMA = Schema(
    "ledger",
    "ledger.sqlite",
    (
        Migration(
            1,
            "payments and refunds",
            sqlite=(
                """CREATE TABLE IF NOT EXISTS payments (
                    payment_ref TEXT PRIMARY KEY,
                    amount_cents INTEGER NOT NULL,
                    currency TEXT NOT NULL,
                    status TEXT NOT NULL DEFAULT 'succeeded'
                )""",
                """CREATE TABLE IF NOT EXISTS refunds (
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
                )""",
            ),
            postgresql=(
                """CREATE TABLE IF NOT EXISTS payments (
                    payment_ref TEXT PRIMARY KEY,
                    amount_cents BIGINT NOT NULL,
                    currency TEXT NOT NULL,
                    status TEXT NOT NULL DEFAULT 'succeeded'
                )""",
                # rowid: PostgreSQL has no implicit one; this stands in for SQLite's, so "in the
                # order they were made" reads the same in both.
                """CREATE TABLE IF NOT EXISTS refunds (
                    refund_id TEXT PRIMARY KEY,
                    idempotency_key TEXT NOT NULL UNIQUE,
                    payment_ref TEXT NOT NULL REFERENCES payments(payment_ref),
                    amount_cents BIGINT NOT NULL,
                    currency TEXT NOT NULL,
                    status TEXT NOT NULL,
                    workflow_id TEXT NOT NULL,
                    order_number TEXT NOT NULL,
                    created_at TEXT NOT NULL,
                    calls INTEGER NOT NULL DEFAULT 1,
                    rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE
                )""",
            ),
        ),
        both(
            2,
            "refunds by payment and by conversation",
            "CREATE INDEX IF NOT EXISTS refunds_by_payment ON refunds (payment_ref)",
            "CREATE INDEX IF NOT EXISTS refunds_by_workflow ON refunds (workflow_id)",
        ),
    ),
)
_REFUND_COLUMNS = (
    "refund_id, idempotency_key, payment_ref, amount_cents, currency, status, workflow_id, "
    "order_number, created_at, calls"
)


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
    def __init__(self, database: Database) -> None:
        self._database = database

    async def seed_payments(self, payments: list[tuple[str, int, str]]) -> None:
        async with self._database.connect(SCHEMA) as db:
            await db.executemany(
                "INSERT INTO payments (payment_ref, amount_cents, currency) VALUES (?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                payments,
            )

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
        async with self._database.connect(SCHEMA) as db, db.transaction():
            # The payment's row first: refunds of one payment are decided one at a time, so the
            # sum in _within_payment sees every refund committed before; refunds of other
            # payments never wait for this one. (SQLite's write transaction holds the file.)
            paid = await db.fetchval(
                f"SELECT amount_cents FROM payments WHERE payment_ref = ?{db.dialect.for_update}",
                payment_ref,
            )
            if paid is None:
                if await db.fetchval(
                    "SELECT 1 FROM refunds WHERE idempotency_key = ?", idempotency_key
                ):
                    return await _replayed(db, refund)  # the key's other payment: a conflict
                raise RefundRejected(f"No such payment: {payment_ref}")
            # The key decides, not a read before the write: of two attempts with one key, the
            # unique constraint lets one insert and makes the other wait for it to end, then
            # find its row.
            made = await db.fetchval(
                f"INSERT INTO refunds ({_REFUND_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (idempotency_key) DO NOTHING RETURNING refund_id",
                *refund.model_dump().values(),
            )
            if made is None:
                return await _replayed(db, refund)
            await _within_payment(db, refund, int(paid))  # raising rolls the new row back
            return refund

    async def seed_refunds(self, refunds: list[SeedRefund]) -> None:
        """Record the demo world's earlier refunds once (idempotent by their keys)."""
        async with self._database.connect(SCHEMA) as db:
            await db.executemany(
                f"INSERT INTO refunds ({_REFUND_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, 'succeeded', '', ?, ?, 1) ON CONFLICT DO NOTHING",
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

    async def refunds_for_payments(self, payment_refs: list[str]) -> list[LedgerRefund]:
        """Every refund of these payments, oldest first (in the order they were made)."""
        if not payment_refs:
            return []
        async with self._database.connect(SCHEMA) as db:
            rows = await db.fetch(
                f"SELECT {_REFUND_COLUMNS} FROM refunds WHERE payment_ref IN "
                f"({', '.join('?' * len(payment_refs))}) ORDER BY created_at, rowid",
                *payment_refs,
            )
        return [LedgerRefund(**dict(r)) for r in rows]

    async def refunds_for_workflow(self, workflow_id: str) -> list[LedgerRefund]:
        async with self._database.connect(SCHEMA) as db:
            rows = await db.fetch(
                f"SELECT {_REFUND_COLUMNS} FROM refunds WHERE workflow_id = ? "
                "ORDER BY created_at, rowid",
                workflow_id,
            )
        return [LedgerRefund(**dict(r)) for r in rows]

    async def all_refunds(self) -> list[LedgerRefund]:
        async with self._database.connect(SCHEMA) as db:
            rows = await db.fetch(
                f"SELECT {_REFUND_COLUMNS} FROM refunds ORDER BY created_at, rowid"
            )
        return [LedgerRefund(**dict(r)) for r in rows]


async def _replayed(db: Connection, attempt: LedgerRefund) -> LedgerRefund:
    """A later call with a key already used: the same refund if the parameters match."""
    row = await db.fetchrow(
        f"UPDATE refunds SET calls = calls + 1 WHERE idempotency_key = ? "
        f"RETURNING {_REFUND_COLUMNS}",
        attempt.idempotency_key,
    )
    assert row is not None  # the insert found it; refunds are never deleted
    existing = LedgerRefund(**dict(row))
    if (existing.payment_ref, existing.amount_cents, existing.currency) != (
        attempt.payment_ref,
        attempt.amount_cents,
        attempt.currency,
    ):
        raise IdempotencyConflict(  # and the count goes back with the transaction
            "Keys for idempotent requests can only be used with the same parameters "
            "they were first used with."
        )
    return existing


async def _within_payment(db: Connection, refund: LedgerRefund, paid: int) -> None:
    """A new refund must stay within what was paid, counting every other refund of the payment."""
    refunded = int(
        await db.fetchval(
            "SELECT COALESCE(SUM(amount_cents), 0) FROM refunds WHERE payment_ref = ? "
            "AND idempotency_key <> ?",
            refund.payment_ref,
            refund.idempotency_key,
        )
    )
    if refunded + refund.amount_cents > paid:
        rejected = AlreadyRefunded if refunded else RefundRejected
        raise rejected(
            f"Refund amount ({refund.amount_cents}) is greater than unrefunded amount on "
            f"payment ({paid - refunded})."
        )

"""issue_refund: the one external effect, sent to the effect's owner with one idempotency key.

The owner is the offline ledger by default, or Stripe test mode when STRIPE_API_KEY is set. SDK
retries are off: every retry is a Temporal Activity attempt, visible in Event History, and every
attempt of a conversation sends the same key, so the owner makes one refund however many calls.
"""

from __future__ import annotations

import asyncio

import stripe
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent.activities.heartbeat import heartbeating
from agent.models import RefundRequest, RefundResult
from agent.settings import AgentSettings
from agent.stores.ledger import IdempotencyConflict, Ledger, RefundRejected
from agent.stripe_client import stripe_client


class RefundActivities:
    def __init__(self, settings: AgentSettings, ledger: Ledger) -> None:
        self._settings = settings
        self._ledger = ledger

    @activity.defn
    async def issue_refund(self, request: RefundRequest) -> RefundResult:
        info = activity.info()
        activity.logger.info(
            "EXTERNAL EFFECT | issue_refund attempt %d, key ...%s",
            info.attempt,
            request.idempotency_key[-8:],
        )
        async with heartbeating():
            if self._settings.stripe_api_key is not None:
                result = await self._stripe_refund(request)
            else:
                result = await self._ledger_refund(request)
            if self._settings.drill_pause_after_effect and info.attempt == 1:
                # DEMO DRILL (the later loss): the owner has accepted the refund and nothing on our
                # side has recorded it. Stop here until the Worker is killed; attempt 2 then sends
                # the same key and gets the same refund back.
                activity.logger.warning("DRILL | refund accepted, pausing before completion")
                await asyncio.Event().wait()
        return result.model_copy(update={"attempt": info.attempt})

    async def _ledger_refund(self, request: RefundRequest) -> RefundResult:
        try:
            refund = await self._ledger.create_refund(
                idempotency_key=request.idempotency_key,
                payment_ref=request.payment_ref,
                amount_cents=request.amount_cents,
                currency=request.currency,
                workflow_id=request.workflow_id,
                order_number=request.order_number,
            )
        except IdempotencyConflict as err:
            raise ApplicationError(
                str(err), type="IdempotencyConflict", non_retryable=True
            ) from err
        except RefundRejected as err:
            raise ApplicationError(str(err), type="RefundRejected", non_retryable=True) from err
        return RefundResult(
            refund_id=refund.refund_id,
            status=refund.status,
            amount_cents=refund.amount_cents,
            idempotency_key=refund.idempotency_key,
            mode="ledger",
            attempt=0,
        )

    async def _stripe_refund(self, request: RefundRequest) -> RefundResult:
        try:
            async with stripe_client(self._settings) as client:
                refund = await client.v1.refunds.create_async(
                    params={
                        "payment_intent": request.payment_ref,
                        "amount": request.amount_cents,
                        "reason": "requested_by_customer",
                        "metadata": {
                            "temporal_workflow_id": request.workflow_id,
                            "temporal_idempotency_key": request.idempotency_key,
                            "order_number": request.order_number,
                        },
                    },
                    options={"idempotency_key": request.idempotency_key},
                )
        except (
            stripe.IdempotencyError,
            stripe.InvalidRequestError,
            stripe.AuthenticationError,
            stripe.PermissionError,
            stripe.CardError,
        ) as err:
            # Permanent: retrying cannot fix it. The message is Stripe's, never the key.
            raise ApplicationError(
                f"Stripe refused the refund: {err.user_message or err.code or type(err).__name__}",
                type=f"Stripe{type(err).__name__}",
                non_retryable=True,
            ) from err
        # RateLimitError, APIConnectionError and 5xx APIError propagate: Temporal retries them.
        return RefundResult(
            refund_id=refund.id,
            status=refund.status or "unknown",
            amount_cents=refund.amount,
            idempotency_key=request.idempotency_key,
            mode="stripe",
            attempt=0,
        )

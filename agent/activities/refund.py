"""issue_refund: the one external effect, sent to the effect's owner with one idempotency key.

The owner is the offline ledger by default, or Stripe test mode when STRIPE_API_KEY is set. SDK
retries are off: every retry is a Temporal Activity attempt, visible in Event History, and every
attempt of a conversation sends the same key, so the owner makes one refund however many calls.

Two conversations about one order race to here with two keys; the owner lets one refund through
and refuses the other (the ledger's "more than was paid", Stripe's charge_already_refunded). That
refusal is an answer, not a failure: the result says already_refunded and carries the earlier
refund as the owner records it, so the losing conversation tells its customer so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent import tracing
from agent.activities.heartbeat import heartbeating
from agent.activities.metrics import count
from agent.effect_owner import effect_owner
from agent.models import ALREADY_REFUNDED, RefundRequest, RefundResult
from agent.settings import AgentSettings
from agent.stores.ledger import AlreadyRefunded, IdempotencyConflict, Ledger, RefundRejected
from agent.stripe_client import stripe_client

if TYPE_CHECKING:
    import stripe

# Stripe's answers to a refund beyond what is left of the payment: fully refunded already, or
# (a partial refund earlier) more than the remainder.
STRIPE_ALREADY_REFUNDED_CODES = frozenset({"charge_already_refunded", "amount_too_large"})


class RefundActivities:
    def __init__(self, settings: AgentSettings, ledger: Ledger) -> None:
        self._settings = settings
        self._ledger = ledger
        self._owner = effect_owner(settings, ledger)

    @activity.defn
    async def issue_refund(self, request: RefundRequest) -> RefundResult:
        info = activity.info()
        activity.logger.info(
            "EXTERNAL EFFECT | issue_refund attempt %d, key ...%s",
            info.attempt,
            request.idempotency_key[-8:],
        )
        owner = "stripe" if self._settings.stripe_api_key is not None else "ledger"
        async with heartbeating():
            try:
                with tracing.span(
                    f"refund.{owner}",
                    "client",
                    owner=owner,
                    workflow_id=request.workflow_id,
                    amount_cents=request.amount_cents,
                    currency=request.currency,
                    attempt=info.attempt,
                ) as span:
                    if owner == "stripe":
                        result = await self._stripe_refund(request)
                    else:
                        result = await self._ledger_refund(request)
                    span.set(status=result.status)
            except ApplicationError as err:
                if err.non_retryable:
                    count("refusals", reason="owner_refused")
                else:
                    count("refund_errors", owner=owner)
                raise
            except Exception:
                # Stripe unreachable, rate limited, a 5xx: Temporal retries the attempt.
                count("refund_errors", owner=owner)
                raise
            if result.status == "succeeded":
                count("refunds_issued", owner=result.mode)
            elif result.status == ALREADY_REFUNDED:
                count("refusals", reason="already_refunded")
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
        except AlreadyRefunded as err:
            return await self._already_refunded(request, "ledger", err)
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
        import stripe  # only a Worker that has Stripe own the effect imports it

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
        except stripe.InvalidRequestError as err:
            if err.code in STRIPE_ALREADY_REFUNDED_CODES or err.param == "amount":
                return await self._already_refunded(request, "stripe", err)
            raise _stripe_refused(err) from err
        except (
            stripe.IdempotencyError,
            stripe.AuthenticationError,
            stripe.PermissionError,
            stripe.CardError,
        ) as err:
            raise _stripe_refused(err) from err
        # RateLimitError, APIConnectionError and 5xx APIError propagate: Temporal retries them.
        return RefundResult(
            refund_id=refund.id,
            status=refund.status or "unknown",
            amount_cents=refund.amount,
            idempotency_key=request.idempotency_key,
            mode="stripe",
            attempt=0,
        )

    async def _already_refunded(
        self, request: RefundRequest, mode: Literal["ledger", "stripe"], refusal: Exception
    ) -> RefundResult:
        """The owner refused: read from it the refund that took the payment first."""
        earlier = [
            r
            for r in await self._owner.refunds_of([request.payment_ref])
            if r.workflow_id != request.workflow_id
        ]
        if not earlier:
            # A refusal with no refund to show for it is not "already refunded": fail it loudly.
            raise ApplicationError(
                f"the owner refused the refund ({refusal}) but holds no earlier refund of "
                f"{request.payment_ref}",
                type="RefundRejected",
                non_retryable=True,
            ) from refusal
        activity.logger.info(
            "EXTERNAL EFFECT | %s was already refunded (%s); no refund made",
            request.payment_ref,
            earlier[0].refund_id,
        )
        return RefundResult(
            refund_id=earlier[0].refund_id,
            status=ALREADY_REFUNDED,
            amount_cents=earlier[0].amount_cents,
            idempotency_key=request.idempotency_key,
            mode=mode,
            attempt=0,
            earlier=earlier[0],
        )


def _stripe_refused(err: stripe.StripeError) -> ApplicationError:
    # Permanent: retrying cannot fix it. Stripe's message goes to Event History and the log, never
    # to the customer (the Workflow says one plain sentence); the key is never in it.
    return ApplicationError(
        f"Stripe refused the refund: {err.user_message or err.code or type(err).__name__}",
        type=f"Stripe{type(err).__name__}",
        non_retryable=True,
    )

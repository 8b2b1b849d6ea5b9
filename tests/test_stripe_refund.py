"""issue_refund in Stripe test mode: the real stripe SDK over real HTTP to a local stand-in."""

from __future__ import annotations

import pytest
from pydantic import SecretStr
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agent.activities.lookups import LookupActivities
from agent.activities.refund import RefundActivities
from agent.effect_owner import effect_owner, refunds_at_owner
from agent.models import ALREADY_REFUNDED, LookupCustomerInput, RefundRequest
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from agent.stores.domain import DomainStore
from agent.stores.ledger import Ledger
from agent.stores.sqlite import SqliteDatabase
from agent.stripe_setup import create_test_payments
from agent.workflow import REFUND_FAILED
from bot.local.thread_store import LocalThreadStore
from harness.conversation import CUSTOMER, LocalConversation
from harness.fakes.stripe_api import FakeStripe
from harness.inproc import running_worker

REQUEST = RefundRequest(
    idempotency_key="refund-bot-abc123",
    workflow_id="slack-T1-C2-1.2",
    order_number="1234",
    payment_ref="pi_demo_1234",
    amount_cents=8000,
    currency="usd",
)


def _lookups(settings: AgentSettings) -> LookupActivities:
    return LookupActivities(DomainStore(database_for(settings)), effect_owner(settings))


def _activities(stripe: FakeStripe, tmp_path) -> tuple[RefundActivities, AgentSettings]:
    settings = AgentSettings(
        _env_file=None,
        data_dir=tmp_path,
        stripe_api_key=SecretStr(stripe.api_key),
        stripe_api_base=stripe.url,
    )
    return RefundActivities(settings, Ledger(database_for(settings))), settings


async def test_one_refund_for_two_attempts_with_one_key(tmp_path) -> None:
    async with FakeStripe() as stripe:
        activities, settings = _activities(stripe, tmp_path)
        first = await ActivityEnvironment().run(activities.issue_refund, REQUEST)
        again = await ActivityEnvironment().run(activities.issue_refund, REQUEST)
        owner = await refunds_at_owner(settings, REQUEST.workflow_id, REQUEST.payment_ref)
    assert first.mode == "stripe" and first.status == "succeeded"
    assert again.refund_id == first.refund_id
    assert len(stripe.refunds) == 1
    posts = [r for r in stripe.requests if r.method == "POST"]
    assert [r.idempotency_key for r in posts] == [REQUEST.idempotency_key] * 2
    assert posts[0].params["metadata[temporal_workflow_id]"] == REQUEST.workflow_id
    assert owner.owner == "Stripe test mode" and len(owner.refunds) == 1
    assert not (tmp_path / "ledger.sqlite").exists()  # Stripe owns the effect, not the ledger


async def test_sdk_retries_are_off_so_a_5xx_is_a_temporal_retry(tmp_path) -> None:
    async with FakeStripe() as stripe:
        activities, _ = _activities(stripe, tmp_path)
        stripe.fail_next(1)
        with pytest.raises(Exception) as failure:
            await ActivityEnvironment().run(activities.issue_refund, REQUEST)
        assert not (isinstance(failure.value, ApplicationError) and failure.value.non_retryable), (
            "a 5xx must stay retryable"
        )
        assert len(stripe.requests) == 1  # no hidden SDK retry
        result = await ActivityEnvironment().run(activities.issue_refund, REQUEST)  # attempt 2
    assert result.status == "succeeded" and len(stripe.refunds) == 1


async def test_same_key_other_parameters_is_a_permanent_error(tmp_path) -> None:
    async with FakeStripe() as stripe:
        activities, _ = _activities(stripe, tmp_path)
        await ActivityEnvironment().run(activities.issue_refund, REQUEST)
        changed = REQUEST.model_copy(update={"amount_cents": 9000})
        with pytest.raises(ApplicationError) as failure:
            await ActivityEnvironment().run(activities.issue_refund, changed)
    assert failure.value.non_retryable
    assert "Stripe refused the refund" in str(failure.value)
    assert stripe.api_key not in str(failure.value)


async def test_a_conversation_in_stripe_test_mode(client, tmp_path) -> None:
    """stripe-setup pays the demo orders in test mode (and makes the demo customer's earlier
    refund there); a conversation then refunds at Stripe, and Stripe's refunds are the history."""
    async with FakeStripe() as stripe:
        _, settings = _activities(stripe, tmp_path)
        created = dict(await create_test_payments(settings))
        assert dict(await create_test_payments(settings)) == {}  # the second run changes nothing
        assert set(created) == {"1234", "4500", "3003", "7777", "1001"}
        assert all(stripe.payment_intents[pi]["status"] == "succeeded" for pi in created.values())
        (earlier,) = stripe.refunds.values()
        assert earlier["payment_intent"] == created["1001"]

        threads = LocalThreadStore(SqliteDatabase(tmp_path))
        async with running_worker(client, settings, threads) as queue:
            conv = LocalConversation(client, threads, queue)
            handle = await conv.open("please refund order 1234")
            for answer in ("Yes", "Split seam"):
                await conv.next_bot_message()
                await conv.reply(answer)
            outcome = await handle.result()
            lookup = _lookups(settings).lookup_customer_history
            found = await ActivityEnvironment().run(lookup, LookupCustomerInput(customer=CUSTOMER))
            history = found.history
    assert outcome.status == "refunded" and outcome.refund and outcome.refund.mode == "stripe"
    refund = stripe.refunds[outcome.refund.refund_id]
    assert refund["payment_intent"] == created["1234"] and refund["amount"] == 8000
    assert refund["metadata"]["temporal_workflow_id"] == handle.id
    # Read from Stripe: the earlier refund and the one the agent just made.
    assert history is not None and len(history.prior_refunds) == 2
    assert {line.split(", ")[1] for line in history.prior_refunds} == {
        "order 1001 (laptop stickers)",
        "order 1234 (plush python)",
    }


async def test_a_refund_stripe_refuses_as_already_refunded_is_an_answer(tmp_path) -> None:
    """Two conversations, two keys, one PaymentIntent: Stripe refunds once and refuses the other
    with charge_already_refunded; the loser's result carries Stripe's record of the first."""
    async with FakeStripe() as stripe:
        activities, settings = _activities(stripe, tmp_path)
        intent = dict(await create_test_payments(settings))["1234"]
        first = REQUEST.model_copy(update={"payment_ref": intent})
        second = first.model_copy(
            update={"idempotency_key": "refund-bot-other", "workflow_id": "slack-T1-C2-9.9"}
        )
        won = await ActivityEnvironment().run(activities.issue_refund, first)
        lost = await ActivityEnvironment().run(activities.issue_refund, second)
    assert won.status == "succeeded"
    assert lost.status == ALREADY_REFUNDED and lost.earlier is not None
    assert lost.earlier.refund_id == won.refund_id == lost.refund_id
    assert lost.earlier.workflow_id == first.workflow_id
    assert len([r for r in stripe.refunds.values() if r["payment_intent"] == intent]) == 1


async def test_stripes_own_words_never_reach_the_thread(client, tmp_path) -> None:
    async with FakeStripe() as stripe:
        _, settings = _activities(stripe, tmp_path)
        await create_test_payments(settings)
        threads = LocalThreadStore(SqliteDatabase(tmp_path))
        async with running_worker(client, settings, threads) as queue:
            conv = LocalConversation(client, threads, queue)
            handle = await conv.open("please refund order 1234")
            for answer in ("Yes", "Split seam"):
                await conv.next_bot_message()
                await conv.reply(answer)
            stripe.refuse_next_refund("Unexpected reason", param="reason")
            outcome = await handle.result()
    said = [m.text for m in await conv.bot_messages()]
    assert outcome.status == "failed" and said[-1] == REFUND_FAILED
    assert not any("Unexpected reason" in text for text in said)
    # The detail is for operators: the run's result in Event History carries it.
    assert outcome.detail is not None and "Unexpected reason" in outcome.detail

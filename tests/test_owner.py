"""Refund history belongs to the effect's owner: the offline ledger, on a real Temporal server.

Whether an order was refunded, and how many refunds a customer has had, is read from the ledger at
lookup time; a race between conversations is decided by the ledger; no raw error reaches a thread.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from temporalio.testing import ActivityEnvironment

from agent.activities.lookups import MAX_REFUND_LINES, LookupActivities
from agent.effect_owner import LedgerOwner
from agent.models import (
    ALREADY_REFUNDED,
    LookupCustomerInput,
    LookupOrderInput,
)
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from agent.stores.domain import DomainStore
from agent.stores.ledger import Ledger
from agent.workflow import REFUND_FAILED
from harness.conversation import CUSTOMER, SUPPORT, LocalConversation
from harness.inproc import running_worker
from harness.owner import place_order, refunds_made

ALREADY = re.compile(
    r"^I can't refund this order\. Order 1234 was already refunded on (\d{4}-\d\d-\d\d) "
    r"\(reference (re_ledger_\w+)\)\.$"
)


async def _answer_both(conv: LocalConversation) -> None:
    for answer in ("Yes", "Split seam"):
        await conv.next_bot_message()
        await conv.reply(answer)


def _lookups(settings: AgentSettings) -> LookupActivities:
    owner = LedgerOwner(Ledger(database_for(settings)))
    return LookupActivities(DomainStore(database_for(settings)), owner)


async def test_lookups_read_refunds_from_the_ledger(client, agent_settings, threads) -> None:
    async with running_worker(client, agent_settings, threads):  # seeds the stores
        lookups = _lookups(agent_settings)
        run = ActivityEnvironment().run
        earlier = await run(
            lookups.lookup_order, LookupOrderInput(order_number="1001", customer=CUSTOMER)
        )
        fresh = await run(
            lookups.lookup_order, LookupOrderInput(order_number="1234", customer=CUSTOMER)
        )
        history = await run(lookups.lookup_customer_history, LookupCustomerInput(customer=CUSTOMER))
    (seeded,) = await Ledger(database_for(agent_settings)).all_refunds()
    assert earlier.order and [r.refund_id for r in earlier.order.refunds] == [seeded.refund_id]
    assert fresh.order and fresh.order.refunds == []
    assert history.history and history.history.orders == 4
    (line,) = history.history.prior_refunds
    assert line.endswith(f"order 1001 (laptop stickers), $18.00, {seeded.refund_id}")


async def test_a_long_history_is_counted_in_full_and_listed_in_part(
    client, agent_settings, threads
) -> None:
    async with running_worker(client, agent_settings, threads):  # seeds the stores
        ledger = Ledger(database_for(agent_settings))
        for n in range(12):
            number = str(8000 + n)
            payment_ref = await place_order(agent_settings, number, amount_cents=1000)
            await ledger.create_refund(
                idempotency_key=f"k-{number}",
                payment_ref=payment_ref,
                amount_cents=1000,
                currency="usd",
                workflow_id=f"local-test-{number}",
                order_number=number,
            )
        found = await ActivityEnvironment().run(
            _lookups(agent_settings).lookup_customer_history, LookupCustomerInput(customer=CUSTOMER)
        )
    history = found.history
    assert history is not None and history.prior_refund_count == 13  # the seed's 1001, and 12
    assert len(history.prior_refunds) == MAX_REFUND_LINES
    assert "order 8011 (desk fan)" in history.prior_refunds[-1]  # the most recent are listed


async def test_a_second_request_for_a_refunded_order_gets_the_owners_date_and_reference(
    client, agent_settings, threads
) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        first = LocalConversation(client, threads, tq)
        handle = await first.open("please refund order 1234")
        await _answer_both(first)
        refunded = await asyncio.wait_for(handle.result(), 60)
        second = LocalConversation(client, threads, tq)
        again = await second.open("refund order 1234 again please")
        denied = await asyncio.wait_for(again.result(), 60)
    assert refunded.status == "refunded" and refunded.refund
    assert denied.status == "denied"
    match = ALREADY.match(denied.message)
    assert match, denied.message
    (refund,) = await refunds_made(agent_settings)
    assert match.groups() == (refund.created_at[:10], refund.refund_id)
    # The owner's record is read before any question: the answer comes at once.
    assert [m.text for m in await second.bot_messages()] == [denied.message]


@pytest.mark.parametrize("held", [True, False], ids=["raced-at-the-owner", "started-together"])
async def test_five_conversations_on_one_order_make_one_refund(
    client, agent_settings, threads, held: bool
) -> None:
    """Five conversations on one order, started together. Held, all five pass the lookups and
    reach issue_refund at once (then released together): the ledger lets one refund through and
    refuses four. Not held, some may see the refund at their lookup instead. Either way: one
    refund, and four customers hear the same already-refunded answer."""
    async with running_worker(client, agent_settings, threads) as tq:
        conversations = [LocalConversation(client, threads, tq) for _ in range(5)]
        handles = await asyncio.gather(
            *(c.open("please refund order 1234", hold=held) for c in conversations)
        )
        await asyncio.gather(*(_answer_both(c) for c in conversations))
        if held:
            await asyncio.gather(*(c.wait_phase("held_before_refund") for c in conversations))
            await asyncio.gather(*(h.signal("release") for h in handles))
        outcomes = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 60)
    (refund,) = await refunds_made(agent_settings)
    assert sorted(o.status for o in outcomes) == ["denied"] * 4 + ["refunded"]
    losers = [o for o in outcomes if o.status == "denied"]
    sentence = (
        f"I can't refund this order. Order 1234 was already refunded on "
        f"{refund.created_at[:10]} (reference {refund.refund_id})."
    )
    assert {o.message for o in losers} == {sentence}
    if held:
        # The owner decided the race: each loser's refund step says so, with the winner's refund.
        assert all(o.refund and o.refund.status == ALREADY_REFUNDED for o in losers)
        assert {o.refund.earlier.refund_id for o in losers if o.refund and o.refund.earlier} == {
            refund.refund_id
        }
    for conv in conversations:
        last = (await conv.bot_messages())[-1].text
        assert last.startswith("Your refund is complete") or last == sentence


async def test_prior_refunds_count_the_agents_own(client, agent_settings, threads) -> None:
    """The demo customer has one earlier refund, so order 1234 is auto-approved; after it, a second
    small order needs a support agent: the count is the ledger's, the agent's refund included."""
    async with running_worker(client, agent_settings, threads) as tq:
        await place_order(agent_settings, "5150", item="desk fan", amount_cents=2500)
        first = LocalConversation(client, threads, tq)
        handle = await first.open("please refund order 1234")
        await _answer_both(first)
        assert (await asyncio.wait_for(handle.result(), 60)).status == "refunded"

        second = LocalConversation(client, threads, tq)
        handle = await second.open("please refund order 5150")
        await _answer_both(second)
        escalation = await second.next_bot_message()
        assert escalation.kind == "escalation"
        assert "The customer has 2 prior refunds" in escalation.text
        await second.click("approve", SUPPORT)
        assert (await asyncio.wait_for(handle.result(), 60)).status == "refunded"
    assert len(await refunds_made(agent_settings)) == 2


async def test_a_ledger_refusal_is_one_plain_sentence(client, agent_settings, threads) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        # An order whose payment the ledger never saw: the owner refuses the refund.
        await place_order(agent_settings, "6060", amount_cents=2500, paid=False)
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 6060")
        await _answer_both(conv)
        outcome = await asyncio.wait_for(handle.result(), 60)
    said = [m.text for m in await conv.bot_messages()]
    assert outcome.status == "failed" and said[-1] == REFUND_FAILED
    assert not any("payment" in text for text in said)
    assert outcome.detail == "No such payment: pi_test_6060"

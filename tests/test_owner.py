"""Refund history belongs to the effect's owner: the offline ledger, on a real Temporal server.

Whether an order was refunded, and how many refunds a customer has had, is read from the ledger at
lookup time.
"""

from __future__ import annotations

import re

import pytest
from temporalio.testing import ActivityEnvironment

from agent.activities.lookups import LookupActivities
from agent.effect_owner import LedgerOwner
from agent.models import LookupCustomerInput, LookupOrderInput
from agent.settings import AgentSettings
from agent.stores.domain import DomainStore
from agent.stores.ledger import Ledger
from bot.local.thread_store import LocalThreadStore
from tests.support.conversation import CUSTOMER, SUPPORT, LocalConversation
from tests.support.inproc import running_worker
from tests.support.owner import place_order, refunds_made

ALREADY = re.compile(
    r"^I can't refund this order\. Order 1234 was already refunded on (\d{4}-\d\d-\d\d) "
    r"\(reference (re_ledger_\w+)\)\.$"
)


@pytest.fixture
def threads(agent_settings: AgentSettings) -> LocalThreadStore:
    return LocalThreadStore(agent_settings.data_dir / "threads.sqlite")


async def _answer_both(conv: LocalConversation) -> None:
    for answer in ("Yes", "Split seam"):
        await conv.next_bot_message()
        await conv.reply(answer)


def _lookups(settings: AgentSettings) -> LookupActivities:
    owner = LedgerOwner(Ledger(settings.ledger_db))
    return LookupActivities(DomainStore(settings.domain_db), owner)


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
    (seeded,) = await Ledger(agent_settings.ledger_db).all_refunds()
    assert earlier.order and [r.refund_id for r in earlier.order.refunds] == [seeded.refund_id]
    assert fresh.order and fresh.order.refunds == []
    assert history.history and history.history.orders == 4
    (line,) = history.history.prior_refunds
    assert line.endswith(f"order 1001 (laptop stickers), $18.00, {seeded.refund_id}")


async def test_a_second_request_for_a_refunded_order_gets_the_owners_date_and_reference(
    client, agent_settings, threads
) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        first = LocalConversation(client, threads, tq)
        handle = await first.open("please refund order 1234")
        await _answer_both(first)
        refunded = await handle.result()
        second = LocalConversation(client, threads, tq)
        again = await second.open("refund order 1234 again please")
        await _answer_both(second)
        denied = await again.result()
    assert refunded.status == "refunded" and refunded.refund
    assert denied.status == "denied"
    match = ALREADY.match(denied.message)
    assert match, denied.message
    (refund,) = await refunds_made(agent_settings.ledger_db)
    assert match.groups() == (refund.created_at[:10], refund.refund_id)
    assert (await second.bot_messages())[-1].text == denied.message


async def test_prior_refunds_count_the_agents_own(client, agent_settings, threads) -> None:
    """The demo customer has one earlier refund, so order 1234 is auto-approved; after it, a second
    small order needs a support agent: the count is the ledger's, the agent's refund included."""
    async with running_worker(client, agent_settings, threads) as tq:
        await place_order(agent_settings, "5150", item="desk fan", amount_cents=2500)
        first = LocalConversation(client, threads, tq)
        handle = await first.open("please refund order 1234")
        await _answer_both(first)
        assert (await handle.result()).status == "refunded"

        second = LocalConversation(client, threads, tq)
        handle = await second.open("please refund order 5150")
        await _answer_both(second)
        escalation = await second.next_bot_message()
        assert escalation.kind == "escalation"
        assert "The customer has 2 prior refunds" in escalation.text
        await second.click("approve", SUPPORT)
        assert (await handle.result()).status == "refunded"
    assert len(await refunds_made(agent_settings.ledger_db)) == 2

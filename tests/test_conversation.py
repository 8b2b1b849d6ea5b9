"""The durable conversation on a real Temporal dev server, with an in-process Worker."""

from __future__ import annotations

from agent.models import Actor, ConversationOutcome
from agent.policy import WHICH_ORDER
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from agent.stores.ledger import Ledger
from harness.conversation import SUPPORT, LocalConversation
from harness.inproc import running_worker
from harness.owner import refunds_made


async def test_happy_path_refunds_once(client, agent_settings, threads) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 1234")
        await conv.answer_the_questions()
        outcome: ConversationOutcome = await handle.result()
    assert outcome.status == "refunded"
    assert outcome.refund and outcome.refund.status == "succeeded"
    assert outcome.refund.amount_cents == 8000
    last = (await conv.bot_messages())[-1]
    assert last.kind == "outcome" and last.text.startswith("Your refund is complete")
    refunds = await Ledger(database_for(agent_settings)).refunds_for_workflow(handle.id)
    assert len(refunds) == 1 and refunds[0].calls == 1


async def test_an_amount_beside_an_order_is_never_looked_up(
    client, agent_settings, threads
) -> None:
    """Two numbers and none named as the order: the agent asks which, and looks up the answer."""
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund 4500 for 1234")
        assert (await conv.next_bot_message()).text == WHICH_ORDER
        await conv.reply("1234")
        await conv.answer_the_questions()
        outcome = await handle.result()
    assert outcome.status == "refunded" and outcome.refund is not None
    assert outcome.refund.amount_cents == 8000  # order 1234's, not order 4500's
    assert [r.workflow_id for r in await refunds_made(agent_settings)] == [handle.id]


async def test_asks_for_the_order_number_when_missing(client, agent_settings, threads) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("my plush arrived torn, I want my money back")
        assert "order number" in (await conv.next_bot_message()).text
        await conv.reply("it's the snake one")  # no number in it: asked again, differently
        assert "couldn't find an order number" in (await conv.next_bot_message()).text
        await conv.reply("#1234")
        # "arrived torn" already says what was damaged: only whether it was opened is asked.
        assert (await conv.next_bot_message()).text == "Was the package opened?"
        await conv.reply("Yes")
        outcome = await handle.result()
    assert outcome.status == "refunded"
    asked = [m.text for m in await conv.bot_messages() if m.kind == "question"]
    assert "What was damaged?" not in asked


async def test_unknown_order_and_another_customers_order_get_the_same_answer(
    client, agent_settings, threads
) -> None:
    answers = []
    async with running_worker(client, agent_settings, threads) as tq:
        for number in ("9999", "7777"):  # 7777 exists, on Marlow's account
            conv = LocalConversation(client, threads, tq)
            handle = await conv.open(f"refund order {number} please")
            outcome = await handle.result()
            assert outcome.status == "denied"
            # Answered at once: no question can make it refundable.
            assert [m.kind for m in await conv.bot_messages()] == ["outcome"]
            answers.append(outcome.message.replace(number, "N"))
    assert answers[0] == answers[1]
    assert "couldn't find order N on your account" in answers[0]
    assert await refunds_made(agent_settings) == []


async def test_final_sale_order_is_denied(client, agent_settings, threads) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("refund order 3003")
        outcome = await handle.result()
    assert outcome.status == "denied" and "final-sale" in outcome.message
    assert [m.kind for m in await conv.bot_messages()] == ["outcome"]  # no question first


async def test_escalation_approved_by_a_grant_holder_refunds(
    client, agent_settings, threads
) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("refund order 4500")
        await conv.answer_the_questions()
        escalation = await conv.next_bot_message()
        assert escalation.kind == "escalation" and escalation.actions == ["approve", "deny"]
        await conv.click("approve", SUPPORT)
        outcome = await handle.result()
    assert outcome.status == "refunded" and outcome.refund and outcome.refund.amount_cents == 45000
    assert len(await Ledger(database_for(agent_settings)).refunds_for_workflow(handle.id)) == 1


async def test_grant_revoked_after_approval_means_no_refund(
    client, agent_settings, threads
) -> None:
    grants = GrantStore(database_for(agent_settings))
    presenter = Actor(platform="local", user_id="presenter")
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("refund order 4500", hold=True)
        await conv.answer_the_questions()
        assert (await conv.next_bot_message()).kind == "escalation"
        await conv.click("approve", SUPPORT)  # a live grant at the click...
        await conv.wait_phase("held_before_refund")
        assert await grants.revoke(SUPPORT, "refund_approver", by=presenter) == 1  # ...revoked
        await handle.signal("release")
        await conv.wait_phase("waiting_for_approval")
        texts = [m.text for m in await conv.bot_messages()]
        assert any("No refund yet" in t and "no live refund_approver grant" in t for t in texts)
        assert await refunds_made(agent_settings) == []
        # A later approval by someone who holds a grant now goes through.
        await grants.grant(SUPPORT, "refund_approver", 100000, by=presenter)
        await conv.click("approve", SUPPORT)
        outcome = await handle.result()
    assert outcome.status == "refunded"


async def test_approval_without_a_grant_gives_no_refund(client, agent_settings, threads) -> None:
    stranger = Actor(platform="local", user_id="marlow", display_name="Marlow")
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("refund order 4500")
        await conv.answer_the_questions()
        await conv.next_bot_message()  # the escalation
        await conv.click("approve", stranger)
        refusal = await conv.next_bot_message()
        assert "Marlow holds no live refund_approver grant" in refusal.text
        assert refusal.actions == ["approve", "deny"]  # the buttons are offered again
        await conv.wait_phase("waiting_for_approval")
        await conv.click("deny", stranger)  # a deny needs a grant too
        assert "can't decline" in (await conv.next_bot_message()).text
        await conv.click("deny", SUPPORT)
        outcome = await handle.result()
    assert outcome.status == "declined"
    assert await refunds_made(agent_settings) == []


async def test_agent_without_its_grant_escalates_instead_of_refunding(
    client, agent_settings, threads
) -> None:
    from agent.models import AGENT_PRINCIPAL

    grants = GrantStore(database_for(agent_settings))
    async with running_worker(client, agent_settings, threads) as tq:
        await grants.revoke(AGENT_PRINCIPAL, "refund_agent", by=SUPPORT)
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 1234")
        await conv.answer_the_questions()
        told = await conv.next_bot_message()
        assert "I can't refund this on my own" in told.text
        assert (await conv.next_bot_message()).kind == "escalation"
        await conv.click("approve", SUPPORT)
        outcome = await handle.result()
    assert outcome.status == "refunded"

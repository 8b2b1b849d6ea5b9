"""What survives: the position the Workflow records in its memo, read as the live view says it.

At each stage of a live conversation, what `what_survives` reads from the server (describe: the
memo, the status, the pending Activities; no Query, so no Worker needed) agrees with the Query.
"""

from __future__ import annotations

from agent.history import Survivors, what_survives
from agent.stores.databases import database_for
from bot.local.thread_store import LocalThreadStore
from harness.conversation import SUPPORT, LocalConversation
from harness.inproc import running_worker


async def test_what_survives_agrees_with_the_live_view(client, agent_settings) -> None:
    """At each stage of a live conversation, Event History alone says what the Query says."""
    threads = LocalThreadStore(database_for(agent_settings))
    async with running_worker(client, agent_settings, threads) as queue:
        conv = LocalConversation(client, threads, queue)
        handle = await conv.open("please refund order 4500", hold=True)

        async def agree(phase: str) -> Survivors:
            view = await conv.wait_phase(phase)
            survivors = await what_survives(client, handle.id)
            assert (survivors.answers, survivors.lookups, survivors.next_action) == (
                view.answers,
                view.lookups,
                view.next_action,
            ), phase
            return survivors

        await conv.next_bot_message()
        asked = await agree("waiting_for_customer")
        assert asked.next_deadline and asked.next_deadline.startswith("remind the customer at ")
        await conv.reply("Yes")
        await conv.next_bot_message()
        await agree("waiting_for_customer")
        await conv.reply("Split seam")
        await conv.next_bot_message()  # the escalation
        escalated = await agree("waiting_for_approval")
        assert escalated.order is not None and escalated.order.order_number == "4500"
        assert escalated.next_deadline and escalated.next_deadline.startswith(
            "remind the approvers"
        )
        await conv.click("approve", SUPPORT, round=1)
        await conv.next_bot_message()  # held before the refund
        await agree("held_before_refund")
        await handle.signal("release")
        await conv.wait_phase("closed")
        await handle.result()  # the run itself closed, not only its view
        closed = await what_survives(client, handle.id)
    assert closed.refund.state == "succeeded" and closed.next_action == "none: closed (refunded)"
    assert closed.answers == {"item_opened": "Yes", "damage": "Split seam"}

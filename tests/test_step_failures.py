"""A short step that fails for good ends the conversation with one plain sentence in the thread.

A local activity that fails for good reaches the Workflow as its own ApplicationError, not as an
ActivityError (only its timeout does); the conversation must treat both alike.
"""

from __future__ import annotations

import uuid

import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from agent.activities.decide import DecideActivities
from agent.activities.notify import NotifyActivities
from agent.models import HistoryLookup, LookupCustomerInput, LookupOrderInput, OrderLookup
from agent.stores.databases import database_for
from agent.workflow import SOMETHING_WENT_WRONG, RefundConversation
from bot.local.thread_store import LocalThreadStore
from harness.conversation import LocalConversation


@activity.defn(name="lookup_order")
async def order_store_refuses(_request: LookupOrderInput) -> OrderLookup:
    # What a store that answers with garbage for good looks like to the Workflow: retrying would
    # change nothing.
    raise ApplicationError("the order store answered nonsense", non_retryable=True)


@activity.defn(name="lookup_customer_history")
async def no_history(_request: LookupCustomerInput) -> HistoryLookup:
    # Read alongside the order (the policy asks for both at once); this one answers.
    return HistoryLookup(history=None)


async def test_a_lookup_that_fails_for_good_says_so_in_the_thread(client, agent_settings) -> None:
    threads = LocalThreadStore(database_for(agent_settings))
    notify = NotifyActivities({"local": threads})
    task_queue = f"test-{uuid.uuid4().hex[:8]}"
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[RefundConversation],
        activities=[
            DecideActivities(agent_settings, notify.post_to_thread).decide_next_step,
            order_store_refuses,
            no_history,
            notify.post_to_thread,
            notify.edit_thread_message,
        ],
    )
    conv = LocalConversation(client, threads, task_queue)
    async with worker:
        handle = await conv.open("please refund order 1234")
        farewell = await conv.next_bot_message()  # the lookups come before any question
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    assert (farewell.kind, farewell.text) == ("outcome", SOMETHING_WENT_WRONG)
    assert "nonsense" not in " ".join(m.text for m in await conv.bot_messages())

"""Temporal really down, then really up: the customer's messages wait in the inbox, in order."""

from __future__ import annotations

from temporalio.client import Client

from agent.settings import AgentSettings, TemporalSettings
from bot.conversations import ConversationRouter, Routed
from bot.inbox import Inbox
from bot.local.terminal import PEOPLE, inbound
from refund_bot.wiring import local_thread_store
from tests.support import free_port
from tests.support.codec import TEST_CONVERTER
from tests.support.conditions import wait_for
from worker.server import EmbeddedTemporal

CUSTOMER = PEOPLE["customer"]


async def test_messages_wait_for_temporal_and_arrive_in_order(tmp_path) -> None:
    address = f"127.0.0.1:{free_port()}"
    temporal = TemporalSettings(_env_file=None, address=address, ui_port=free_port())  # type: ignore[call-arg]
    settings = AgentSettings(_env_file=None, data_dir=tmp_path)  # type: ignore[call-arg]
    # A lazy client connects on first use, as a bot that starts before its Temporal would.
    client = await Client.connect(address, data_converter=TEST_CONVERTER, lazy=True)
    inbox = Inbox(tmp_path / "inbox.sqlite")

    async def no_hold() -> bool:
        return False

    router = ConversationRouter(client, temporal.task_queue, inbox, no_hold)
    threads = local_thread_store(settings)
    root = await threads.open_thread("support", CUSTOMER.user_id, "please refund order 1234")
    reply = await threads.add_reply(root.thread_id, CUSTOMER.user_id, "Yes")

    assert await router.on_message(inbound(root, CUSTOMER)) == Routed.QUEUED
    assert await router.on_message(inbound(reply, CUSTOMER)) == Routed.QUEUED
    assert await router.deliver_pending() == 0  # still down: kept, not dropped
    assert await inbox.size() == 2

    async with EmbeddedTemporal(temporal, tmp_path):
        delivered = await wait_for(router.deliver_pending, timeout=30, what="the inbox delivered")
        assert delivered == 2 and await inbox.size() == 0
        handle = client.get_workflow_handle(f"local-local-support-{root.thread_id}")
        history = await handle.fetch_history()
    signals = [
        e.workflow_execution_signaled_event_attributes
        for e in history.events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    texts = [(await TEST_CONVERTER.decode(s.input.payloads))[0]["text"] for s in signals]
    assert texts == [
        "please refund order 1234",
        "Yes",
    ]  # the opening (signal-with-start), then the reply

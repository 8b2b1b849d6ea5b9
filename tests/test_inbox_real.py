"""The inbox against a real Temporal: really down then up, refusing one conversation, a namespace
that does not exist yet. The customers' messages wait, in order, and none is lost."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from agent.models import Actor, ThreadRef
from agent.settings import AgentSettings, TemporalSettings
from agent.stores.sqlite import SqliteDatabase
from agent.visibility import VERSION_ATTRIBUTE
from bot.conversations import ConversationRouter, InboundMessage, Routed
from bot.ids import workflow_id_for
from bot.inbox import Inbox
from bot.local.terminal import PEOPLE, inbound
from bot.reconnect import Backoff
from harness import free_port
from harness.codec import TEST_CONVERTER
from harness.conditions import wait_for
from refund_bot.wiring import local_thread_store
from worker.server import EmbeddedTemporal

CUSTOMER = PEOPLE["customer"]


async def test_messages_wait_for_temporal_and_arrive_in_order(tmp_path) -> None:
    address = f"127.0.0.1:{free_port()}"
    temporal = TemporalSettings(_env_file=None, address=address, ui_port=free_port())
    settings = AgentSettings(_env_file=None, data_dir=tmp_path)
    # A lazy client connects on first use, as a bot that starts before its Temporal would.
    client = await Client.connect(address, data_converter=TEST_CONVERTER, lazy=True)
    inbox = Inbox(SqliteDatabase(tmp_path))

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


async def test_a_conversation_temporal_refuses_is_a_dead_letter_and_holds_back_no_other(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    inbox = Inbox(SqliteDatabase(tmp_path))
    router = ConversationRouter(
        temporal_env.client,
        f"refused-{uuid.uuid4().hex[:8]}",
        inbox,
        _no_hold,
        max_attempts=3,
        inbox_retry=Backoff(first=0, cap=0, jitter=False),
    )
    # A thread id no Workflow ID may be built from: Temporal refuses it (its length limit).
    refused = ThreadRef(platform="slack", workspace="T1", channel="C2", thread="9" * 1200)
    fine = ThreadRef(platform="slack", workspace="T1", channel="C2", thread=uuid.uuid4().hex)

    assert await router.on_message(_opening("r1", refused)) == Routed.QUEUED
    assert await router.on_message(_opening("f1", fine)) == Routed.STARTED  # not held back
    [kept] = await inbox.pending()
    assert kept.attempts == 1 and kept.last_error and "RPCError" in kept.last_error

    await router.deliver_pending()
    await router.deliver_pending()
    [dead] = await inbox.dead_letters()
    assert dead.attempts == 3 and dead.workflow_id == workflow_id_for(refused)
    assert dead.error == kept.last_error
    assert (await inbox.depth()).waiting == 0
    description = await temporal_env.client.get_workflow_handle(workflow_id_for(fine)).describe()
    assert description.status == WorkflowExecutionStatus.RUNNING
    await temporal_env.client.get_workflow_handle(workflow_id_for(fine)).terminate("test over")


async def test_messages_for_a_namespace_not_there_yet_arrive_once_it_is(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    namespace = f"late-{uuid.uuid4().hex[:8]}"
    address = temporal_env.client.service_client.config.target_host
    client = await Client.connect(address, namespace=namespace, data_converter=TEST_CONVERTER)
    inbox = Inbox(SqliteDatabase(tmp_path))
    router = ConversationRouter(
        client,
        "refund-bot",
        inbox,
        _no_hold,
        max_attempts=1000,
        inbox_retry=Backoff(first=0.2, cap=1.0, jitter=False),
    )
    thread = ThreadRef(platform="slack", workspace="T1", channel="C2", thread=uuid.uuid4().hex)
    # Not "unreachable": Temporal answers, and refuses (no such namespace). Kept, not raised.
    assert await router.on_message(_opening("e1", thread)) == Routed.QUEUED
    reply = _opening("e2", thread).model_copy(update={"opens_thread": False, "text": "Yes"})
    assert await router.on_message(reply) == Routed.QUEUED  # behind the opening, in order

    delivery = asyncio.create_task(router.run_delivery())
    try:
        # The operator creates the namespace as docs/versioning.md says: with refund-bot's
        # search attribute, without which no conversation can start in it.
        await temporal_env.client.workflow_service.register_namespace(
            RegisterNamespaceRequest(
                namespace=namespace,
                workflow_execution_retention_period=Duration(seconds=86400),
            )
        )

        async def attribute_added() -> bool:
            # The new namespace reaches the server's cache a moment after it is registered.
            try:
                await temporal_env.client.operator_service.add_search_attributes(
                    AddSearchAttributesRequest(
                        namespace=namespace,
                        search_attributes={
                            VERSION_ATTRIBUTE.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
                        },
                    )
                )
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                return False
            return True

        await wait_for(attribute_added, timeout=60, interval=0.5, what="the namespace known")

        async def delivered() -> bool:
            return (await inbox.depth()).waiting == 0

        await wait_for(delivered, timeout=90, interval=0.5, what="the inbox delivered")
    finally:
        delivery.cancel()
    handle = client.get_workflow_handle(workflow_id_for(thread))
    history = await handle.fetch_history()
    signals = [
        e.workflow_execution_signaled_event_attributes
        for e in history.events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    texts = [(await TEST_CONVERTER.decode(s.input.payloads))[0]["text"] for s in signals]
    assert texts == ["please refund order 1234", "Yes"]
    await handle.terminate("test over")


async def _no_hold() -> bool:
    return False


def _opening(event_id: str, thread: ThreadRef) -> InboundMessage:
    return InboundMessage(
        event_id=event_id,
        thread=thread,
        message_id=f"m-{event_id}",
        author=Actor(platform="slack", user_id="U0CUSTOMER", display_name="Nyghtowl"),
        text="please refund order 1234",
        opens_thread=True,
    )

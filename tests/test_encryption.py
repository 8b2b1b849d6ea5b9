"""Event History on a real server is ciphertext; through the codec it reads back exactly.

Raw histories are read with the service API (fetch_history returns the events as the server holds
them; nothing decodes them), then searched byte by byte.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from agent.codec import ENCODING, KEY_ID_METADATA, CodecKey, MissingCodecKey
from agent.decoded_history import decoded_history
from agent.history import what_survives
from agent.models import MEMO_KEY, Actor, CustomerMessage
from agent.settings import TemporalSettings
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from agent.temporal_client import connect
from agent.workflow import RefundConversation
from bot.commands import CommandReply, Commands, RestartReport
from bot.hold import HoldSwitch
from bot.local.terminal import PEOPLE
from bot.slack.commands import resolve_conversation
from harness.codec import TEST_KEY, codec_payloads, raw_bytes
from harness.conversation import LocalConversation
from harness.inproc import running_worker
from worker.runner import prepare_stores

CUSTOMER = Actor(platform="local", user_id="customer", display_name="Ottoline Quimby")
OPENING = "please refund order 1234, the plush python I got for my nephew"
ANSWER = "The left seam split the first time he hugged it"
ITEM = "plush python"  # order 1234's item, from the domain store


async def _client(client: Client, keys: list[CodecKey]) -> Client:
    """Another client on the session's server, holding `keys`."""
    settings = TemporalSettings(
        _env_file=None,
        address=client.service_client.config.target_host,
        namespace=client.namespace,
    )
    return await connect(settings, keys=keys)


async def _told(conv: LocalConversation) -> None:
    assert (await conv.next_bot_message()).text == "Was the package opened?"
    await conv.reply("Yes")
    assert (await conv.next_bot_message()).text == "What was damaged?"
    await conv.reply(ANSWER)


async def test_raw_history_holds_no_customer_words_and_reads_back_exactly(
    client, agent_settings, threads
) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq, customer=CUSTOMER)
        handle = await conv.open(OPENING)
        await _told(conv)
        outcome = await handle.result()
    assert outcome.status == "refunded"

    raw = await handle.fetch_history()
    stored = raw_bytes(raw)
    for private in (OPENING, ANSWER, CUSTOMER.display_name, ITEM, "seam", "nephew"):
        assert private.encode() not in stored, private
    # Every payload through the codec (the SDK core's own marker data holds no customer data).
    payloads = [p for event in raw.events for p in codec_payloads(event)]
    assert len(payloads) > 15  # the start, the Signals, every step's input or result
    assert all(p.metadata["encoding"] == ENCODING for p in payloads)
    assert {p.metadata[KEY_ID_METADATA] for p in payloads} == {TEST_KEY.key_id.encode()}

    # Through the codec: every word as the customer wrote it, every word the agent said.
    decoded = await decoded_history(raw, client.data_converter)
    plain = raw_bytes(decoded)
    for private in (OPENING, ANSWER, CUSTOMER.display_name, ITEM):
        assert private.encode() in plain, private  # so the checks above could have failed
    converter = client.data_converter.payload_converter
    said = [
        converter.from_payloads(e.workflow_execution_signaled_event_attributes.input.payloads)[0]
        for e in decoded.events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    assert [CustomerMessage.model_validate(s).text for s in said] == [OPENING, "Yes", ANSWER]
    for said_by_agent in await conv.bot_messages():
        assert said_by_agent.text.encode() in plain, said_by_agent.text
    # The record /refund-status reads is ciphertext on the server too, and reads back exactly.
    memo = (await handle.describe()).raw_description.workflow_execution_info.memo
    assert memo.fields[MEMO_KEY].metadata["encoding"] == ENCODING
    survivors = await what_survives(client, handle.id)
    assert survivors.answers == {"item_opened": "Yes", "damage": ANSWER}
    assert survivors.order is not None and survivors.order.item == ITEM
    assert survivors.outcome == outcome


@activity.defn(name="refuse_with_customer_words")
async def refuse_with_customer_words(text: str) -> None:
    raise ApplicationError(f"could not handle: {text}", type="Refused", non_retryable=True)


@workflow.defn(name="FailsWithCustomerWords", sandboxed=False)
class FailsWithCustomerWords:
    @workflow.run
    async def run(self, text: str) -> None:
        try:
            await workflow.execute_activity(
                refuse_with_customer_words,
                text,
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=1),
            )
        except Exception as err:
            raise ApplicationError(f"the conversation about {text} failed") from err


async def test_failure_messages_are_encrypted_too(client) -> None:
    # An ApplicationError's message is not a payload: the failure converter moves it into one.
    tq, workflow_id = f"failures-{uuid.uuid4().hex[:8]}", f"fails-{uuid.uuid4().hex}"
    async with Worker(
        client,
        task_queue=tq,
        workflows=[FailsWithCustomerWords],
        activities=[refuse_with_customer_words],
    ):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(
                FailsWithCustomerWords.run, ANSWER, id=workflow_id, task_queue=tq
            )
    # The caller, holding the key, reads the real message.
    assert isinstance(failed.value.cause, ApplicationError)
    assert failed.value.cause.message == f"the conversation about {ANSWER} failed"
    raw = await client.get_workflow_handle(workflow_id).fetch_history()
    failures = [
        e.activity_task_failed_event_attributes.failure
        for e in raw.events
        if e.HasField("activity_task_failed_event_attributes")
    ] + [
        e.workflow_execution_failed_event_attributes.failure
        for e in raw.events
        if e.HasField("workflow_execution_failed_event_attributes")
    ]
    assert len(failures) == 2
    assert all(f.message == "Encoded failure" and not f.stack_trace for f in failures)
    assert ANSWER.encode() not in raw_bytes(raw)
    decoded = await decoded_history(raw, client.data_converter)
    messages = [
        e.activity_task_failed_event_attributes.failure.message
        for e in decoded.events
        if e.HasField("activity_task_failed_event_attributes")
    ]
    assert messages == [f"could not handle: {ANSWER}"]


async def test_a_conversation_started_under_key_1_finishes_under_key_2(
    client, agent_settings, threads
) -> None:
    k1, k2 = CodecKey.generate("rotation-1"), CodecKey.generate("rotation-2")
    before = await _client(client, [k1])
    async with running_worker(before, agent_settings, threads) as tq:
        conv = LocalConversation(before, threads, tq, customer=CUSTOMER)
        handle = await conv.open(OPENING)
        assert (await conv.next_bot_message()).text == "Was the package opened?"

    # The deploy: k2 first (it encrypts from now on), k1 kept so what it wrote still decrypts.
    after = await _client(client, [k2, k1])
    conv.client = after
    conv.handle = after.get_workflow_handle_for(RefundConversation.run, handle.id)
    async with running_worker(after, agent_settings, threads, tq):
        await conv.reply("Yes")
        assert (await conv.next_bot_message()).text == "What was damaged?"
        await conv.reply(ANSWER)
        outcome = await conv.handle.result()
    assert outcome.status == "refunded"

    raw = await conv.handle.fetch_history()
    ids = [p.metadata[KEY_ID_METADATA] for e in raw.events for p in codec_payloads(e)]
    assert ids[0] == b"rotation-1" and ids[-1] == b"rotation-2"
    assert set(ids) == {b"rotation-1", b"rotation-2"}
    survivors = await what_survives(after, handle.id)
    assert survivors.answers == {"item_opened": "Yes", "damage": ANSWER}

    # The record was last written under k2; the history still needs k1, and says so clearly.
    k2_only = await _client(client, [k2])
    assert (await what_survives(k2_only, handle.id)).answers == survivors.answers
    with pytest.raises(MissingCodecKey, match="'rotation-1'"):
        await decoded_history(raw, k2_only.data_converter)


class NoRestart:
    """The Worker supervisors (bot.commands.WorkerControl), never asked here."""

    async def supervisor_hosts(self) -> list[str]:
        raise AssertionError("not called")

    async def restart(
        self, host: str | None, while_down: Callable[[], Awaitable[None]] | None = None
    ) -> RestartReport:
        raise AssertionError("not called")


async def test_a_missing_key_is_one_clear_line_for_every_reader(
    client, agent_settings, threads, tmp_path
) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq, customer=CUSTOMER)
        handle = await conv.open(OPENING)
        await conv.next_bot_message()
    workflow_id = handle.id
    stranger = CodecKey.generate("someone-else")

    # /refund-status, for a presenter, from a bot that lacks the key.
    await prepare_stores(agent_settings)
    without = await _client(client, [stranger])

    commands = Commands(
        without,
        NoRestart(),
        agent_settings,
        GrantStore(database_for(agent_settings)),
        HoldSwitch(database_for(agent_settings), False),
    )
    reply = await commands.refund_status(PEOPLE["presenter"], workflow_id)
    assert not reply.ok
    assert f"Can't read {workflow_id}:" in reply.text
    assert f"{TEST_KEY.key_id!r}" in reply.text and "\n" not in reply.text

    # `refund-bot status`, with the wrong key and then the right one.
    def status(codec_keys: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "refund_bot", "status", workflow_id],
            env={
                "PATH": "/usr/bin:/bin",
                "TEMPORAL_ADDRESS": client.service_client.config.target_host,
                "TEMPORAL_NAMESPACE": client.namespace,
                "DATA_DIR": str(tmp_path),
                "CODEC_KEYS": codec_keys,
            },
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    wrong = status(stranger.entry())
    assert wrong.returncode == 1, wrong.stderr
    (line,) = wrong.stderr.strip().splitlines()
    assert line.startswith(f"refund-bot: Event History is encrypted with codec key {'tests-1'!r}")
    assert "'someone-else'" in line and wrong.stdout == ""
    right = status(TEST_KEY.entry())
    assert right.returncode == 0, right.stderr
    assert '"item_opened"' not in right.stdout  # not answered yet
    assert '"customer_signals": 1' in right.stdout


async def test_finding_a_slack_conversation_by_order_without_the_key_says_so() -> None:
    async def finder(team_id: str, order_number: str) -> str | None:
        raise MissingCodecKey(TEST_KEY.key_id, ["someone-else"])

    reply = await resolve_conversation("4500", "T0SHOP", "/refund-status", finder)
    assert isinstance(reply, CommandReply) and not reply.ok
    assert reply.text.startswith("Can't search conversations by order: Event History is encrypted")
    assert f"{TEST_KEY.key_id!r}" in reply.text

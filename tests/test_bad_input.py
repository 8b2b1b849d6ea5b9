"""Bad input gets a clear answer and loses nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from pydantic import ValidationError

from agent.models import MAX_TEXT_CHARS, Actor
from agent.settings import AgentSettings
from agent.workflow import FINISHED
from harness.conditions import wait_for
from harness.conversation import LocalConversation
from harness.inproc import running_worker
from tests.support.outcome_gate import OutcomeGate
from worker.runner import build_worker


async def test_duplicate_message_ids_are_applied_once(client, agent_settings, threads) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 1234")
        await conv.next_bot_message()
        mid = await conv.reply("Yes")
        await conv.reply("No", message_id=mid)  # a platform retry of the same message
        second = await conv.next_bot_message()
        assert second.text == "What was damaged?"
        view = await conv.wait_phase("waiting_for_customer")
        # The redelivery did not answer the second question, nor wait in the queue to.
        assert view.answers == {"item_opened": "Yes"}
        await conv.reply("Split seam")
        outcome = await handle.result()
    assert outcome.status == "refunded"
    questions = [m.text for m in await conv.bot_messages() if m.kind == "question"]
    assert questions == ["Was the package opened?", "What was damaged?"]


async def test_opening_message_redelivered_is_not_an_answer(
    client, agent_settings, threads
) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        await conv.open("please refund order 1234")
        await conv.next_bot_message()
        root = (await threads.messages(conv.thread_id))[0]
        await conv.reply(root.text, message_id=root.message_id)  # signal-with-start retried
        view = await conv.wait_phase("waiting_for_customer")
        assert view.answers == {} and view.queued_messages == 0


async def test_empty_and_oversized_text(client, agent_settings, threads) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 1234")
        await conv.next_bot_message()
        await conv.reply("   \n ")  # empty: not an answer
        await conv.reply("y" * (MAX_TEXT_CHARS * 5))
        await conv.next_bot_message()
        view = await conv.view()
        assert view.answers["item_opened"] == "y" * MAX_TEXT_CHARS
        await conv.reply("Split seam")
        assert (await handle.result()).status == "refunded"


async def test_only_the_threads_customer_answers(client, agent_settings, threads) -> None:
    bystander = Actor(platform="local", user_id="marlow", display_name="Marlow")
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 1234")
        await conv.next_bot_message()
        await conv.reply("No", author=bystander)
        await conv.reply("Yes")
        await conv.next_bot_message()
        assert (await conv.view()).answers == {"item_opened": "Yes"}
        await conv.reply("Split seam")
        assert (await handle.result()).status == "refunded"


async def test_messages_that_arrive_mid_step_wait_in_order(client, agent_settings, threads) -> None:
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 1234")
        await conv.next_bot_message()
        # Both answers arrive before the agent has asked its second question.
        await conv.reply("Yes")
        await conv.reply("Split seam")
        outcome = await handle.result()
        view = await conv.view()
    assert outcome.status == "refunded"
    assert view.answers == {"item_opened": "Yes", "damage": "Split seam"}
    questions = [m.text for m in await conv.bot_messages() if m.kind == "question"]
    assert questions == ["Was the package opened?", "What was damaged?"]


async def test_a_message_written_while_the_outcome_is_posted_is_answered(
    client, agent_settings, threads
) -> None:
    # The router signals a conversation that is still running; by the time the Signal lands, the
    # conversation is saying its last word. The customer hears that it has finished.
    gate = OutcomeGate(threads)
    tq = f"late-{id(gate)}"
    worker = await build_worker(client, tq, agent_settings, {"local": gate})
    async with worker:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 9999")  # no such order: denied at once
        await asyncio.wait_for(gate.reached.wait(), 30)
        await conv.reply("thanks!")
        gate.open.set()
        outcome = await asyncio.wait_for(handle.result(), 30)
    assert outcome.status == "denied"
    said = [(m.kind, m.text) for m in await conv.bot_messages()][-2:]
    assert said == [("outcome", outcome.message), ("info", FINISHED)]


async def test_a_message_the_conversation_never_read_is_answered_when_it_closes(
    client, agent_settings, threads
) -> None:
    # Written while the escalation waits for a support agent: nothing reads it as an answer, so
    # the conversation answers it once it has said its outcome.
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open("please refund order 4500")  # above the limit: escalated
        for answer in ("Yes", "Split seam"):
            await conv.next_bot_message()
            await conv.reply(answer)
        assert (await conv.next_bot_message()).kind == "escalation"
        await conv.reply("any news?")

        async def queued() -> bool:
            return (await conv.view()).queued_messages == 1

        await wait_for(queued, what="the message queued in the conversation")
        await conv.click("approve")
        outcome = await asyncio.wait_for(handle.result(), 30)
    assert outcome.status == "refunded"
    said = [(m.kind, m.text) for m in await conv.bot_messages()][-2:]
    assert said == [("outcome", outcome.message), ("info", FINISHED)]


def test_live_stripe_key_is_refused_by_settings() -> None:
    # Each a str, as the environment gives it (the settings' __init__ is typed SecretStr).
    with pytest.raises(ValidationError, match="live-mode key"):
        AgentSettings(_env_file=None, stripe_api_key="sk_live_abc123")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="test-mode key"):
        AgentSettings(_env_file=None, stripe_api_key="pk_test_abc123")  # type: ignore[arg-type]
    ok = AgentSettings(_env_file=None, stripe_api_key="sk_test_abc123")  # type: ignore[arg-type]
    assert ok.effect_mode == "stripe"
    assert "sk_test_abc123" not in repr(ok)


def test_live_stripe_key_is_refused_at_start_up(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "refund_bot", "worker"],
        env={
            "PATH": "/usr/bin:/bin",
            "STRIPE_API_KEY": "sk_live_secret_value",
            "DATA_DIR": str(tmp_path),
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "live-mode key" in proc.stderr and "sk_test_" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "sk_live_secret_value" not in proc.stderr + proc.stdout

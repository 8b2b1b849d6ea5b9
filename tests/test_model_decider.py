"""The live-model decider: the real openai SDK over real HTTP to a local stand-in."""

from __future__ import annotations

import pytest
from pydantic import SecretStr
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import TemporalError

from agent.activities.model import STEP_BUDGET_SECONDS
from agent.history import what_survives
from agent.policy import QUESTIONS
from agent.settings import AgentSettings
from agent.stores.sqlite import SqliteDatabase
from agent.workflow import MODEL_STEP_TIMEOUT, SOMETHING_WENT_WRONG
from bot.local.thread_store import LocalThreadStore
from harness.conversation import LocalConversation
from harness.fakes.openai_api import FakeOpenAI
from harness.inproc import running_worker


def _settings(tmp_path, model: FakeOpenAI) -> AgentSettings:
    return model.agent_settings(tmp_path)


async def _answer(conv: LocalConversation) -> None:
    for answer in ("Yes", "Split seam"):
        await conv.next_bot_message()
        await conv.reply(answer)


async def test_model_chooses_lookups_and_decision_once_each(client, tmp_path) -> None:
    async with FakeOpenAI() as model:
        settings = _settings(tmp_path, model)
        threads = LocalThreadStore(SqliteDatabase(tmp_path))
        async with running_worker(client, settings, threads) as queue:
            conv = LocalConversation(client, threads, queue)
            handle = await conv.open("please refund order 1234", decider="openai")
            await _answer(conv)
            outcome = await handle.result()
    assert outcome.status == "refunded"
    # The intake questions are the policy's; the model was asked three times, once per step.
    assert len(model.requests) == 3
    sent = model.requests[-1]
    assert sent["model"] == "test-model" and sent["store"] is False
    assert sent["tool_choice"] == "required"
    assert "Split seam" in sent["input"] and "lookup_customer_history" in sent["input"]
    survivors = await what_survives(client, handle.id)
    assert survivors.lookups == ["lookup_order", "lookup_customer_history"]


async def test_a_model_5xx_is_one_call_and_a_temporal_retry(client, tmp_path) -> None:
    async with FakeOpenAI() as model:
        settings = _settings(tmp_path, model)
        threads = LocalThreadStore(SqliteDatabase(tmp_path))
        async with running_worker(client, settings, threads) as queue:
            conv = LocalConversation(client, threads, queue)
            handle = await conv.open("please refund order 1234", decider="openai")
            model.fail_next(1)
            await _answer(conv)
            outcome = await handle.result()
    assert outcome.status == "refunded"
    # 1 failed call (no hidden SDK retry) + the retry + two more steps.
    assert len(model.requests) == 4


async def test_a_model_that_refuses_the_call_ends_with_a_plain_sentence(client, tmp_path) -> None:
    """The model API answers 401 (a revoked key): not retried, and the customer hears one plain
    sentence instead of silence (the model is asked first, which lookups to run); the run fails
    for an operator to see."""
    async with FakeOpenAI(api_key="sk-the-key-the-api-wants") as model:
        settings = _settings(tmp_path, model).model_copy(
            update={"openai_api_key": SecretStr("sk-a-revoked-key")}
        )
        threads = LocalThreadStore(SqliteDatabase(tmp_path))
        async with running_worker(client, settings, threads) as queue:
            conv = LocalConversation(client, threads, queue)
            handle = await conv.open("please refund order 1234", decider="openai")
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
    said = [(m.kind, m.text) for m in await conv.bot_messages()]
    assert said == [("outcome", SOMETHING_WENT_WRONG)]
    assert len(model.requests) == 1  # a 401 is not retried
    cause = failed.value.cause
    assert isinstance(cause, TemporalError)
    assert "HTTP 401" in str(cause.cause)  # the detail, for operators


async def test_the_model_asks_the_agents_own_questions(client, tmp_path) -> None:
    """On the model's path a message without an order number is asked for it, not denied; the
    model asks with a question's id, and the thread reads the agent's sentence for it."""
    async with FakeOpenAI(behaviour="asks") as model:
        settings = _settings(tmp_path, model)
        threads = LocalThreadStore(SqliteDatabase(tmp_path))
        async with running_worker(client, settings, threads) as queue:
            conv = LocalConversation(client, threads, queue)
            handle = await conv.open("I want my money back", decider="openai")
            for asked, answer in (
                (QUESTIONS["order_number"], "1234"),
                (QUESTIONS["item_opened"], "Yes"),
                (QUESTIONS["damage"], "Split seam"),
            ):
                message = await conv.next_bot_message()
                assert (message.kind, message.text) == ("question", asked)
                await conv.reply(answer)
            outcome = await handle.result()
    assert outcome.status == "refunded"
    offered = {tool["name"]: tool for tool in model.requests[0]["tools"]}
    question = offered["ask_customer"]["parameters"]["properties"]["question"]
    assert question["enum"] == ["order_number", "item_opened", "damage"]


def test_the_models_retries_fit_in_one_attempt_of_its_step() -> None:
    assert MODEL_STEP_TIMEOUT.total_seconds() > STEP_BUDGET_SECONDS

"""The live-model decider: the real openai SDK over real HTTP to a local stand-in."""

from __future__ import annotations

from agent.decoded_history import decoded_history
from agent.history import survivors_from_history
from agent.settings import AgentSettings
from bot.local.thread_store import LocalThreadStore
from tests.fakes.openai_api import FakeOpenAI
from tests.support.conversation import LocalConversation
from tests.support.inproc import running_worker


def _settings(tmp_path, model: FakeOpenAI) -> AgentSettings:
    return AgentSettings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=tmp_path,
        openai_api_key=model.api_key,
        openai_base_url=model.api_url,
        openai_model="test-model",
    )


async def _answer(conv: LocalConversation) -> None:
    for answer in ("Yes", "Split seam"):
        await conv.next_bot_message()
        await conv.reply(answer)


async def test_model_chooses_lookups_and_decision_once_each(client, tmp_path) -> None:
    async with FakeOpenAI() as model:
        settings = _settings(tmp_path, model)
        threads = LocalThreadStore(tmp_path / "threads.sqlite")
        async with running_worker(client, settings, threads) as queue:
            conv = LocalConversation(client, threads, queue)
            handle = await conv.open("please refund order 1234", decider="openai")
            await _answer(conv)
            outcome = await handle.result()
            history = await decoded_history(await handle.fetch_history(), client.data_converter)
    assert outcome.status == "refunded"
    # The intake questions are the policy's; the model was asked three times, once per step.
    assert len(model.requests) == 3
    sent = model.requests[-1]
    assert sent["model"] == "test-model" and sent["store"] is False
    assert sent["tool_choice"] == "required"
    assert "Split seam" in sent["input"] and "lookup_customer_history" in sent["input"]
    survivors = survivors_from_history(history)
    assert survivors.lookups == ["lookup_order", "lookup_customer_history"]


async def test_a_model_5xx_is_one_call_and_a_temporal_retry(client, tmp_path) -> None:
    async with FakeOpenAI(decision="deny") as model:
        settings = _settings(tmp_path, model)
        threads = LocalThreadStore(tmp_path / "threads.sqlite")
        async with running_worker(client, settings, threads) as queue:
            conv = LocalConversation(client, threads, queue)
            handle = await conv.open("please refund order 1234", decider="openai")
            model.fail_next(1)
            await _answer(conv)
            outcome = await handle.result()
    assert outcome.status == "denied"
    # 1 failed call (no hidden SDK retry) + the retry + two more steps.
    assert len(model.requests) == 4

"""The offline policy's decide step posts the question it asks, under the key the Workflow gave it:
a turn is one local step. A platform that fails or does not answer in time leaves no post behind
in the step's result, and the Workflow's Activity posts it under the same key."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from temporalio.testing import ActivityEnvironment

from agent.activities.decide import DecideActivities
from agent.models import (
    DecideInput,
    MessageKey,
    OutboundMessage,
    PostedMessage,
    QuestionPost,
    Takeover,
    ThreadRef,
)
from agent.policy import QUESTIONS
from agent.sayings import taken_over
from agent.settings import AgentSettings
from agent.workflow import RefundConversation
from harness.conversation import SUPPORT, LocalConversation
from tests.support.first_activity import BeforeFirst
from worker.runner import build_worker

THREAD = ThreadRef(platform="local", workspace="local", channel="support", thread="t1")
KEY = MessageKey(workflow_id="local-local-support-t1", run_id="run-1", seq=3)
NO_ORDER = "I want my money back"  # the policy asks for the order number first


class Platform:
    def __init__(self, answer: str = "posted") -> None:
        self.answer = answer  # posted | down | silent
        self.asked: list[OutboundMessage] = []

    async def post(self, message: OutboundMessage) -> PostedMessage:
        self.asked.append(message)
        if self.answer == "down":
            raise ConnectionError("the platform is down")
        if self.answer == "silent":
            await asyncio.Event().wait()
        return PostedMessage(platform_message_id="m1", duplicate=False, message=message)


def _request(opening: str, within_seconds: float = 5.0) -> DecideInput:
    where = QuestionPost(thread=THREAD, key=KEY, within_seconds=within_seconds)
    return DecideInput(opening_text=opening, memory=[], turn=1, post_question=where)


async def test_the_question_is_posted_by_the_step_that_asks_it(tmp_path) -> None:
    platform = Platform()
    decide = DecideActivities(AgentSettings(_env_file=None, data_dir=tmp_path), platform.post)
    step = await ActivityEnvironment().run(decide.decide_next_step, _request(NO_ORDER))
    assert (step.action, step.question_id) == ("ask", "order_number")
    [message] = platform.asked
    assert (message.key, message.thread, message.kind) == (KEY, THREAD, "question")
    assert message.text == step.question
    assert step.posted is not None and step.posted.message == message


async def test_a_step_that_does_not_ask_posts_nothing(tmp_path) -> None:
    platform = Platform()
    decide = DecideActivities(AgentSettings(_env_file=None, data_dir=tmp_path), platform.post)
    step = await ActivityEnvironment().run(
        decide.decide_next_step, _request("please refund order 1234")
    )
    assert step.action == "lookup" and step.posted is None
    assert platform.asked == []


@pytest.mark.parametrize("answer", ["down", "silent"])
async def test_a_platform_in_trouble_leaves_the_question_to_the_workflow(
    tmp_path, caplog, answer: str
) -> None:
    platform = Platform(answer)
    decide = DecideActivities(AgentSettings(_env_file=None, data_dir=tmp_path), platform.post)
    began = time.monotonic()
    step = await ActivityEnvironment().run(
        decide.decide_next_step, _request(NO_ORDER, within_seconds=0.3)
    )
    # Decided all the same, within the post's time: the Workflow posts it under the same key.
    assert (step.action, step.question_id, step.posted) == ("ask", "order_number", None)
    assert time.monotonic() - began < 5
    assert [m.key for m in platform.asked] == [KEY]
    assert "the question's post waits for the Workflow's" in caplog.text


async def test_without_a_place_to_post_the_step_only_decides(tmp_path) -> None:
    """The model's path, and conversations of version 1.0: the Workflow posts the question."""
    platform = Platform()
    decide = DecideActivities(AgentSettings(_env_file=None, data_dir=tmp_path), platform.post)
    request = DecideInput(opening_text=NO_ORDER, memory=[], turn=1)
    step = await ActivityEnvironment().run(decide.decide_next_step, request)
    assert step.action == "ask" and step.posted is None and platform.asked == []


async def test_a_post_made_while_the_step_decides_does_not_take_the_questions_key(
    client, agent_settings, threads
) -> None:
    """A support agent takes the conversation over while the decide step runs: the takeover's
    sentence is posted then, and the question the step asks still reaches the thread (the key was
    the question's before the step began)."""
    started, go = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        started.set()
        await go.wait()

    task_queue = f"test-asks-{uuid.uuid4().hex[:8]}"
    worker = await build_worker(
        client,
        task_queue,
        agent_settings,
        {"local": threads},
        interceptors=[BeforeFirst("decide_next_step", hold)],
    )
    async with worker:
        conv = LocalConversation(client, threads, task_queue)
        handle = await conv.open(NO_ORDER)
        await asyncio.wait_for(started.wait(), 20)
        await handle.signal(RefundConversation.takeover, Takeover(actor=SUPPORT, taken=True))
        said = await conv.next_bot_message()
        go.set()
        asked = await conv.next_bot_message()
    assert said.text == taken_over(SUPPORT.label)
    assert asked.text == QUESTIONS["order_number"]
    texts = [m.text for m in await conv.bot_messages()]
    assert texts == [said.text, asked.text]

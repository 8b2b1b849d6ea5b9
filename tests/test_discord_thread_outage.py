"""Discord cannot open a customer's thread for a while: the real `refund-bot run`, on real Temporal.

    500s to every thread creation, then Discord healthy   -> the conversation opens, is answered
    then no answer to any thread creation for a while     -> the next one too
    then a thread Discord opens without saying so, and 500s after it, the customer answering in
        it meanwhile                                      -> the answer is kept, and taken after
                                                             the opening
    refund-bot SIGKILLed (its whole tree) while it fails  -> restarted, Discord healthy: delivered

The process is configured as in tests/test_discord_e2e.py, with its thread retries made short
(DISCORD_THREAD_ATTEMPT_SECONDS, DISCORD_THREAD_RETRY_CAP_SECONDS), so an outage of as many
attempts as two minutes would take on the defaults lasts seconds here. Each time: one thread, one
conversation, the opening message in it once, the customer told of the delay once, nothing left
in the inbox, and never a traceback.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from agent.history import what_survives
from agent.stores.sqlite import SqliteDatabase
from bot.discord.openings import DELAYED, WAITS_FOR
from bot.inbox import Inbox
from harness import free_port
from harness.cli_process import RefundBotProcess, clean_environment
from harness.codec import TEST_CODEC_ENV
from harness.conditions import wait_for
from harness.fakes.discord_api import THREADS_ROUTE, FakeDiscordAPI, ThreadFailure
from tests.support.discord_guild import CUSTOMER, GUILD, SUPPORT, seed_guild

STARTUP = 120.0  # a Worker child to start and poll, on a machine shared with other test runs
TURN = 60.0
# One attempt ends well before discord.py's own first wait after a 500 (1 s): one request each.
ATTEMPT = 0.5
CAP = 0.2


@dataclass
class Lab:
    api: FakeDiscordAPI
    temporal_env: WorkflowEnvironment
    tmp: Path
    env: dict[str, str]
    stack: AsyncExitStack

    async def bot(self) -> RefundBotProcess:
        """`refund-bot run`, once it is logged in and connected to the fake's gateway."""
        identified = len(self.api.gateway.identifies)
        process = await RefundBotProcess.start(["run"], self.env, self.tmp)
        self.stack.push_async_callback(process.close)
        await wait_for(
            lambda: len(self.api.gateway.identifies) > identified or not process.running,
            timeout=STARTUP,
            what="the bot connected to the gateway",
        )
        assert process.running, process.output
        return process

    def inbox(self) -> Inbox:
        return Inbox(SqliteDatabase(self.tmp / "data"))


@pytest.fixture
async def lab(temporal_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Lab]:
    queue = f"discord-outage-{uuid.uuid4().hex[:8]}"
    async with FakeDiscordAPI() as api, AsyncExitStack() as stack:
        seed_guild(api)
        env = clean_environment(
            **TEST_CODEC_ENV,
            DISCORD_TOKEN=api.token,
            DISCORD_SUPPORT_CHANNEL_ID=str(SUPPORT),
            DISCORD_GUILD_ID=str(GUILD),
            DISCORD_API_URL=api.api_url,
            DISCORD_GATEWAY_URL=api.gateway_url,
            DISCORD_GATEWAY_LEASE_SECONDS="3",  # a killed bot's gateway is free again soon
            DISCORD_THREAD_ATTEMPT_SECONDS=str(ATTEMPT),
            DISCORD_THREAD_RETRY_CAP_SECONDS=str(CAP),
            DISCORD_THREAD_DELAY_NOTICE_SECONDS="1",
            DEMO_CUSTOMER_FOR_NEW_USERS="cus_nyghtowl",
            DATA_DIR=str(tmp_path / "data"),
            TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
            TEMPORAL_TASK_QUEUE=queue,
            TEMPORAL_CONTROL_TASK_QUEUE=f"{queue}-control",
            TEMPORAL_UI_PORT=str(free_port()),
        )
        yield Lab(api, temporal_env, tmp_path, env, stack)


def bot_messages(api: FakeDiscordAPI, channel_id: int | str) -> list[dict[str, Any]]:
    return [m for m in api.messages(channel_id) if m["author"]["id"] == api.bot_user["id"]]


async def first_question(api: FakeDiscordAPI, thread_id: str) -> dict[str, Any]:
    async def asked() -> dict[str, Any] | None:
        return next(iter(bot_messages(api, thread_id)), None)

    return await wait_for(asked, timeout=TURN, what="the agent's first question in the thread")


async def assert_one_conversation(lab: Lab, opening: dict[str, Any]) -> None:
    """Opened once, answered, the opening taken once, told of the delay once, nothing kept."""
    thread_id = opening["id"]
    question = await first_question(lab.api, thread_id)
    assert question["content"] == "Was the package opened?"
    created = [
        r.status
        for r in lab.api.requests_to(THREADS_ROUTE)
        if r.path.endswith(f"/{thread_id}/threads")
    ]
    assert created.count(201) == 1
    thread = lab.api.channel(thread_id)
    assert thread is not None and thread["parent_id"] == str(SUPPORT)
    survived = await what_survives(lab.temporal_env.client, f"discord-{GUILD}-{thread_id}")
    assert survived.customer_signals == 1  # the opening, once
    assert told(lab.api, thread_id) == [DELAYED]
    await wait_for(lambda: _inbox_empty(lab), timeout=TURN, what="the inbox empty once delivered")


def told(api: FakeDiscordAPI, message_id: str) -> list[str]:
    """The bot's replies to a message in the support channel."""
    return [
        m["content"]
        for m in bot_messages(api, SUPPORT)
        if m.get("message_reference", {}).get("message_id") == message_id
    ]


async def _inbox_empty(lab: Lab) -> bool:
    return (await lab.inbox().depth()).waiting == 0


# 12 attempts of 500s: twice as many as two minutes of 500s make on the defaults (each of those is
# discord.py's five requests in 25 s, which was all the bot survived). Then 6 s without any
# answer: 30 times the backoff's cap, 12 times an attempt's bound.
OUTAGES: list[tuple[ThreadFailure, dict[str, Any]]] = [
    (500, {"times": 12}),
    ("hang", {"seconds": 6.0}),
]


async def test_openings_outlive_500s_and_no_answer_to_thread_creation(lab: Lab) -> None:
    bot = await lab.bot()
    for failure, outage in OUTAGES:
        before = lab.api.thread_failures
        lab.api.fail_threads(failure, **outage)
        opening = lab.api.user_message(SUPPORT, CUSTOMER, f"please refund order 4500 ({failure})")
        await assert_one_conversation(lab, opening)
        failed = lab.api.thread_failures - before
        assert failed == outage.get("times", failed) and failed >= 6, failed

    # Discord opens the thread but never says so, then fails: the customer already answers in it.
    lab.api.fail_threads("late", times=1)
    opening = lab.api.user_message(SUPPORT, CUSTOMER, "please refund order 4500 (late)")
    thread_id = opening["id"]
    await wait_for(lambda: lab.api.channel(thread_id), timeout=TURN, what="the thread, unsaid")
    lab.api.fail_threads(500)
    lab.api.user_message(int(thread_id), CUSTOMER, "Yes")  # kept behind the opening
    await wait_for(lambda: bot_messages(lab.api, thread_id), timeout=TURN, what="its notice")
    # Failing past the router's own later look at what it kept (KEPT_GRACE): only the opening's
    # release is left to send the answer on.
    failed = lab.api.thread_failures
    await wait_for(lambda: lab.api.thread_failures >= failed + 10, timeout=TURN, what="failures")
    lab.api.heal_threads()

    async def damage_asked() -> bool:
        return "What was damaged?" in [m["content"] for m in bot_messages(lab.api, thread_id)]

    await wait_for(damage_asked, timeout=TURN, what="the reply taken after the opening")
    survived = await what_survives(lab.temporal_env.client, f"discord-{GUILD}-{thread_id}")
    assert survived.customer_signals == 2  # the opening, then "Yes"
    assert lab.api.channel(thread_id) is not None
    assert bot.output.count("could not open a thread on message") >= 18
    assert "Traceback" not in bot.output
    assert await bot.stop() == 0


async def test_an_opening_outlives_a_kill_of_the_bot_while_its_thread_fails(lab: Lab) -> None:
    first = await lab.bot()
    lab.api.fail_threads(500)  # until healed
    opening = lab.api.user_message(SUPPORT, CUSTOMER, "please refund order 4500")
    await wait_for(lambda: lab.api.thread_failures >= 3, timeout=TURN, what="three failures")
    [waiting] = await lab.inbox().waiting(WAITS_FOR)  # kept, under its thread-to-be
    assert waiting.workflow_id == f"discord-{GUILD}-{opening['id']}"
    await wait_for(lambda: told(lab.api, opening["id"]), timeout=TURN, what="the delay told")

    # The host loses power: every process of the tree at once.
    for pid in first.tree() | {first.pid}:
        os.kill(pid, signal.SIGKILL)
    await first.exit_code(timeout=TURN)
    attempts = lab.api.thread_attempts
    lab.api.heal_threads()

    second = await lab.bot()
    assert lab.api.gateway.resumes == []  # a new session: Discord replays nothing
    await assert_one_conversation(lab, opening)
    assert lab.api.thread_attempts > attempts
    assert "Traceback" not in second.output
    assert await second.stop() == 0

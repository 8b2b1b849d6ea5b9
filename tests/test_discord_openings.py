"""A customer's opening message when Discord cannot open its thread: kept first, never lost.

The client is fed the gateway's JSON through discord.py's parsers (tests/support/discord_client)
and opens threads on the fake Discord over real HTTP; the fake fails thread creation the ways
Discord does (harness.fakes.discord_api.fail_threads). The router is the recording fake; the real
process on a real Temporal and inbox, killed mid-outage, is tests/test_discord_thread_outage.py.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from agent.settings import AgentSettings
from agent.stores.grants import GrantStore
from agent.stores.sqlite import SqliteDatabase
from bot.commands import Commands
from bot.discord.openings import DELAYED
from bot.discord.settings import DiscordSettings
from bot.hold import HoldSwitch
from harness.conditions import wait_for
from harness.fakes.discord_api import THREADS_ROUTE, FakeDiscordAPI
from harness.recording_router import RecordingRouter
from tests.support.discord_client import (
    Bot,
    FakeRestart,
    StagingDemos,
    StubTemporal,
    connected,
)
from tests.support.discord_guild import CUSTOMER, SUPPORT, seed_guild

# Attempts bounded well below discord.py's own first wait after a 500 (1 s): one request each.
QUICK: dict[str, Any] = {
    "thread_attempt_seconds": 0.5,
    "thread_retry_cap_seconds": 0.1,
    "thread_delay_notice_seconds": 1.0,
}


@pytest.fixture
async def api() -> AsyncIterator[FakeDiscordAPI]:
    async with FakeDiscordAPI() as fake:
        seed_guild(fake)
        yield fake


@pytest.fixture
async def bot(api: FakeDiscordAPI, tmp_path: Path) -> AsyncIterator[Bot]:
    settings = DiscordSettings(
        _env_file=None,
        token=SecretStr(api.token),
        support_channel_id=SUPPORT,
        api_url=api.api_url,
        **QUICK,
    )
    store = GrantStore(SqliteDatabase(tmp_path))
    agent = AgentSettings(_env_file=None, data_dir=tmp_path)
    hold = HoldSwitch(SqliteDatabase(tmp_path), False)
    # Stub Temporal and restart: no command runs here.
    temporal: Any = StubTemporal()
    demos: Any = StagingDemos()
    commands = Commands(temporal, FakeRestart(), agent, store, hold, demos)
    router = RecordingRouter()
    async with connected(api, settings, router, commands, store, sync_commands=False) as b:
        yield b


def bot_replies(api: FakeDiscordAPI, message_id: str) -> list[str]:
    """What the bot answered to a message in the support channel, as replies to it."""
    return [
        m["content"]
        for m in api.messages(SUPPORT)
        if m["author"]["id"] == api.bot_user["id"]
        and m.get("message_reference", {}).get("message_id") == message_id
    ]


async def released(bot: Bot, count: int = 1) -> None:
    await wait_for(lambda: len(bot.router.messages) >= count, what="the opening delivered")


async def test_connection_resets_delay_the_opening_and_no_traceback_is_logged(
    bot: Bot, caplog: pytest.LogCaptureFixture
) -> None:
    bot.api.fail_threads("reset", times=4)
    with caplog.at_level(logging.INFO):
        message_id = await bot.post(SUPPORT, CUSTOMER, "My lamp arrived broken")
        await released(bot)

    assert bot.api.thread_failures == 4
    assert [r.status for r in bot.api.requests_to(THREADS_ROUTE)][-1:] == [201]
    assert bot.api.channel(message_id) is not None  # the thread, on the message's id
    [opening] = bot.router.messages
    assert opening.opens_thread and opening.thread.thread == message_id
    assert bot.router.held == {}
    failures = [r for r in caplog.records if "could not open a thread" in r.getMessage()]
    assert len(failures) == 4
    assert not [r for r in caplog.records if r.exc_info], "a network error is not a traceback"


async def test_the_opening_is_kept_before_its_thread_is_asked_for(bot: Bot) -> None:
    bot.api.fail_threads("hang")  # Discord takes the request and never answers
    message_id = await bot.post(SUPPORT, CUSTOMER, "Refund please, order 1042")
    await wait_for(lambda: bot.api.thread_attempts >= 2, what="two attempts without an answer")

    # Kept while no attempt has had an answer, under the id its thread will have.
    [waiting] = bot.router.held.values()
    assert waiting.kept.event_id == message_id
    assert waiting.kept.workflow_id.endswith(f"-{message_id}")
    assert waiting.attempts >= 1 and bot.router.messages == []
    bot.api.heal_threads()
    await released(bot)
    assert bot.router.messages[0].message_id == message_id


async def test_a_thread_discord_opened_without_answering_is_used_not_opened_twice(
    bot: Bot,
) -> None:
    bot.api.fail_threads("late", times=1)  # done, but the answer never comes
    message_id = await bot.post(SUPPORT, CUSTOMER, "Refund please")
    await released(bot)

    # The second attempt is told "A thread has already been created for this message" (160004).
    statuses = [r.status for r in bot.api.requests_to(THREADS_ROUTE)]
    assert statuses[-1] == 400 and 201 not in statuses
    assert bot.api.thread_attempts == 2
    assert bot.api.channel(message_id) is not None
    assert bot.router.messages[0].thread.thread == message_id


async def test_a_late_thread_is_said_once_as_a_reply_and_the_opening_goes_on(bot: Bot) -> None:
    bot.api.fail_threads(500, seconds=2.5)  # 2.5 times the notice, 25 times the backoff's cap
    message_id = await bot.post(SUPPORT, CUSTOMER, "Refund please")
    await released(bot)

    assert bot.api.thread_failures >= 4
    assert bot_replies(bot.api, message_id) == [DELAYED]
    assert [r.status for r in bot.api.requests_to(THREADS_ROUTE)][-1] == 201


async def test_a_prompt_thread_says_nothing_in_the_channel(bot: Bot) -> None:
    message_id = await bot.post(SUPPORT, CUSTOMER, "Refund please")
    await released(bot)
    assert bot_replies(bot.api, message_id) == []


async def test_a_message_deleted_before_its_thread_opened_is_forgotten(bot: Bot) -> None:
    event = bot.api.user_message(SUPPORT, CUSTOMER, "never mind")
    bot.api.message_delete_event(SUPPORT, event["id"])  # gone before the bot's first attempt
    bot.gateway("MESSAGE_CREATE", event)
    after = await bot.post(SUPPORT, CUSTOMER, "Refund please")  # the positive control
    await wait_for(lambda: bot.router.messages and not bot.router.held, what="both handled")

    assert [m.message_id for m in bot.router.messages] == [after]
    assert bot.api.channel(event["id"]) is None


async def test_a_reply_in_an_uncached_thread_is_routed_when_its_parent_cannot_be_looked_up(
    bot: Bot,
) -> None:
    message_id = await bot.post(SUPPORT, CUSTOMER, "Refund please")
    await released(bot)
    # No THREAD_CREATE reached this client, and Discord cannot say what the channel is now.
    bot.api.fail_channel(message_id, 403)
    await bot.post(int(message_id), CUSTOMER, "order 1042")
    await wait_for(lambda: len(bot.router.messages) == 2, what="the reply routed")

    reply = bot.router.messages[1]
    assert reply.thread == bot.router.messages[0].thread  # the Workflow decides it is ours
    assert not reply.opens_thread


async def _raw_thread(api: FakeDiscordAPI, message_id: str) -> int:
    async with aiohttp.ClientSession() as http:
        response = await http.post(
            f"{api.api_url}/channels/{SUPPORT}/messages/{message_id}/threads",
            json={"name": "opened elsewhere"},
            headers={"Authorization": f"Bot {api.token}"},
        )
        return response.status


async def test_a_thread_another_replica_opened_is_this_conversations(bot: Bot) -> None:
    event = bot.api.user_message(SUPPORT, CUSTOMER, "Refund please")
    assert await _raw_thread(bot.api, event["id"]) == 201  # another bot replica got there first
    bot.gateway("MESSAGE_CREATE", event)
    await released(bot)
    assert bot.router.messages[0].thread.thread == event["id"]
    assert [r.status for r in bot.api.requests_to(THREADS_ROUTE)] == [201, 400]

"""The Discord client over a real websocket: `serve` against the fake Discord's gateway.

discord.py logs in over REST and connects to DISCORD_GATEWAY_URL (harness.fakes.discord_gateway):
HELLO, IDENTIFY, READY, GUILD_CREATE, heartbeats, zlib-stream, events dispatched as Discord
dispatches them, RESUME. What is checked here is the connection itself: where it goes, what it asks
for, how it survives drops and redeliveries, and how a refusal looks. The router is the recording
fake; no Temporal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import WSMsgType
from pydantic import SecretStr

from agent.models import Actor
from bot.discord.client import RefundBotClient, build_client, serve
from bot.discord.settings import DiscordSettings
from bot.platform_health import PlatformHealth
from bot.reconnect import Backoff
from harness import free_port
from harness.conditions import wait_for
from harness.fakes.discord_api import THREADS_ROUTE, FakeDiscordAPI
from harness.fakes.discord_gateway import GUILD_MESSAGES, GUILDS, MESSAGE_CONTENT
from harness.recording_router import RecordingRouter
from tests.support.discord_guild import (
    CUSTOMER,
    GUILD,
    STRANGER,
    SUPPORT,
    seed_guild,
)

QUICK = Backoff(first=0.05, cap=0.2, jitter=False)


@dataclass
class Running:
    api: FakeDiscordAPI
    client: RefundBotClient
    router: RecordingRouter
    health: PlatformHealth

    async def routed(self, count: int) -> None:
        await wait_for(lambda: len(self.router.messages) >= count, what=f"{count} routed")


@pytest.fixture
async def api() -> AsyncIterator[FakeDiscordAPI]:
    async with FakeDiscordAPI() as fake:
        seed_guild(fake)
        fake.gateway.heartbeat_interval_ms = 500  # several heartbeats within a test
        yield fake


def settings_for(api: FakeDiscordAPI, **overrides: Any) -> DiscordSettings:
    values: dict[str, Any] = {
        "token": SecretStr(api.token),
        "support_channel_id": SUPPORT,
        "guild_id": GUILD,
        "api_url": api.api_url,
        "gateway_url": api.gateway_url,
        **overrides,
    }
    return DiscordSettings(_env_file=None, **values)


@asynccontextmanager
async def serving(api: FakeDiscordAPI, settings: DiscordSettings) -> AsyncIterator[Running]:
    """`serve` in a task, as `refund-bot run` runs it; cancelled (and checked closed) at the end."""
    router = RecordingRouter()
    # No command is run here: the commands object is never reached.
    client = build_client(settings, router, None, can_approve=_allow)  # type: ignore[arg-type]
    health = PlatformHealth("discord")
    task = asyncio.create_task(serve(client, settings, health, backoff=QUICK))
    try:
        yield Running(api, client, router, health)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert client.is_closed() and health.state == "stopped"


async def test_it_connects_where_told_with_zlib_stream_and_asks_for_three_intents(
    api: FakeDiscordAPI,
) -> None:
    async with serving(api, settings_for(api)) as bot:
        await wait_for(lambda: bot.health.ok, what="READY")
        [query] = api.gateway.queries
        assert query == {"v": "10", "encoding": "json", "compress": "zlib-stream"}
        [identify] = api.gateway.identifies
        assert identify["intents"] == GUILDS | GUILD_MESSAGES | MESSAGE_CONTENT
        assert identify["compress"] is True and "token" not in identify
        # Every message came compressed in binary frames; the large GUILD_CREATE in two.
        assert set(api.gateway.frames) == {WSMsgType.BINARY} and api.gateway.split_messages >= 1
        assert bot.client.get_channel(SUPPORT) is not None  # GUILD_CREATE was read
        await wait_for(lambda: api.gateway.heartbeats >= 2, what="heartbeats, each acknowledged")

        api.user_message(SUPPORT, CUSTOMER, "please refund order 4500")
        await bot.routed(1)
        [opening] = bot.router.messages
        assert opening.opens_thread and opening.text == "please refund order 4500"


async def test_a_redelivered_opening_makes_no_second_thread_request(api: FakeDiscordAPI) -> None:
    async with serving(api, settings_for(api)) as bot:
        await wait_for(lambda: bot.health.ok, what="READY")
        api.user_message(SUPPORT, CUSTOMER, "please refund order 4500")
        await bot.routed(1)
        [opening] = api.gateway.sent("MESSAGE_CREATE")
        assert len(api.requests_to(THREADS_ROUTE)) == 1

        # Discord asks the bot to reconnect; on RESUME it delivers the opening once more.
        await api.gateway.request_reconnect(redeliver_from=opening.seq)
        await wait_for(lambda: api.gateway.resumes, what="the RESUME")
        assert [s.event for s in api.gateway.replayed()][:1] == ["MESSAGE_CREATE"]
        assert api.gateway.replayed()[0].data["id"] == opening.data["id"]
        # A later opening is routed after the redelivery was handled: by then no second thread.
        api.user_message(SUPPORT, STRANGER, "my order never came")
        await bot.routed(2)
        assert [m.author.user_id for m in bot.router.messages] == [str(CUSTOMER), str(STRANGER)]
        threads = api.requests_to(THREADS_ROUTE)
        assert [r.path.split("/")[4] for r in threads] == [
            opening.data["id"],
            bot.router.messages[1].message_id,
        ]
        assert all(r.status == 201 for r in threads)  # none refused as "already created"


async def test_a_resume_goes_to_the_configured_gateway_not_discords(api: FakeDiscordAPI) -> None:
    async with serving(api, settings_for(api)) as bot:
        await wait_for(lambda: bot.health.ok, what="READY")
        [ready] = api.gateway.sent("READY")
        assert "discord.gg" in ready.data["resume_gateway_url"]  # out of reach here
        # The connection drops; a message arrives while the bot is away.
        await api.gateway.close_connections(4000)
        api.user_message(SUPPORT, CUSTOMER, "sent while the bot was reconnecting")
        await bot.routed(1)  # replayed by the RESUME, at the fake: nothing was missed
        assert api.gateway.resumes[0]["session_id"] == ready.data["session_id"]
        assert api.gateway.connections_opened == 2 and len(api.gateway.identifies) == 1


async def test_an_invalidated_session_identifies_again_at_the_configured_gateway(
    api: FakeDiscordAPI, caplog: pytest.LogCaptureFixture
) -> None:
    async with serving(api, settings_for(api)) as bot:
        await wait_for(lambda: bot.health.ok, what="READY")
        # discord.py on its own would now go to gateway.discord.gg (its DEFAULT_GATEWAY).
        await api.gateway.invalidate_sessions()
        await wait_for(lambda: len(api.gateway.identifies) == 2, what="a new IDENTIFY")
        api.user_message(SUPPORT, CUSTOMER, "still here?")
        await bot.routed(1)
    assert warnings(caplog) == []  # Discord's request, followed at once: no failure to report


async def test_a_gateway_that_closes_every_connection_at_once_is_backed_off(
    api: FakeDiscordAPI, caplog: pytest.LogCaptureFixture
) -> None:
    async with serving(api, settings_for(api)) as bot:
        await wait_for(lambda: bot.health.ok, what="READY")
        api.gateway.close_every_connection_after_hello = True  # a broken proxy, say
        await api.gateway.close_connections(4000)
        await wait_for(lambda: bot.health.failures >= 3, what="three failed reconnects")
        assert bot.health.state == "retrying"
        assert bot.health.detail == "ConnectionLost: the gateway asked to RESUME before any event"
    assert len(warnings(caplog)) >= 3


async def test_a_refused_token_is_one_line_and_discord_down(
    api: FakeDiscordAPI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with serving(api, settings_for(api, token=SecretStr("wrong-token"))) as bot:
        await wait_for(lambda: bot.health.state == "down", what="Discord down")
        assert "DISCORD_TOKEN" in bot.health.detail and "401" in bot.health.detail
        assert api.requests_to("GET /users/@me")[0].status == 401
        errors = warnings(caplog)
        assert [r.name for r in errors] == ["bot.reconnect"]
        assert errors[0].exc_info is None and "\n" not in errors[0].getMessage()
        assert api.gateway.connections_opened == 0
    assert "wrong-token" not in caplog.text


async def test_the_message_content_intent_refused_is_one_line_and_discord_down(
    api: FakeDiscordAPI, caplog: pytest.LogCaptureFixture
) -> None:
    api.application["flags"] = 0  # the intent is off in the Developer Portal
    async with serving(api, settings_for(api)) as bot:
        await wait_for(lambda: bot.health.state == "down", what="Discord down")
        assert "Message Content intent" in bot.health.detail and "4014" in bot.health.detail
        [error] = warnings(caplog)
        assert error.name == "bot.reconnect" and error.exc_info is None
        assert len(api.gateway.identifies) == 1


async def test_a_gateway_that_fails_is_retried_with_one_line_each(
    api: FakeDiscordAPI, caplog: pytest.LogCaptureFixture
) -> None:
    api.gateway.refuse_connections(3)
    async with serving(api, settings_for(api)) as bot:
        await wait_for(lambda: bot.health.ok, what="connected after three refusals")
        assert api.gateway.connections_opened == 1 and len(api.gateway.queries) == 4
    lines = warnings(caplog)
    assert len(lines) == 3 and {r.name for r in lines} == {"bot.reconnect"}
    assert all(r.exc_info is None and "503" in r.getMessage() for r in lines)
    delays = [float(r.getMessage().rsplit(" ", 1)[1].rstrip("s")) for r in lines]
    assert delays == [0.05, 0.1, 0.2]  # doubling, capped


async def test_discord_unreachable_is_retrying_not_raised(
    api: FakeDiscordAPI, caplog: pytest.LogCaptureFixture
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    settings = settings_for(
        api, api_url=f"{closed}/api/v10", gateway_url=closed.replace("http", "ws")
    )
    async with serving(api, settings) as bot:
        await wait_for(lambda: bot.health.failures >= 3, what="three failed attempts")
        assert bot.health.state == "retrying"
        assert bot.health.detail.startswith("ClientConnectorError: Cannot connect to host")
    lines = warnings(caplog)
    assert len(lines) >= 3 and all(r.exc_info is None for r in lines)


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


async def _allow(actor: Actor) -> bool:
    return True


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/", "gateway.example.com", "wss://"])
def test_the_gateway_url_must_be_a_websocket_url(url: str) -> None:
    with pytest.raises(ValueError, match="DISCORD_GATEWAY_URL must be a ws:// or wss:// URL"):
        DiscordSettings(_env_file=None, gateway_url=url)
    ok = DiscordSettings(_env_file=None, gateway_url=" wss://proxy.example/ ")
    assert ok.gateway_url == "wss://proxy.example/"

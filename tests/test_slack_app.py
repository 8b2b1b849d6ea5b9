"""The Slack inbound half, fed the JSON Slack sends, through the real bolt AsyncApp.

Requests are signed as Slack signs them and dispatched through `AsyncApp.async_dispatch` (the same
call the aiohttp adapter and Socket Mode make); the Web API is the local FakeSlackApi over real
HTTP; the router and the commands are recording fakes (no Temporal here).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import re
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from agent.models import Actor, ThreadRef
from agent.stores.grants import Grant
from agent.stores.sqlite import SqliteDatabase
from bot.conversations import (
    NOT_KEPT,
    NOTICES,
    ConversationRouter,
    InboundClick,
    InboundMessage,
    Routed,
)
from bot.dedup import RecentEvents
from bot.ids import workflow_id_for
from bot.inbox import Inbox
from bot.keyed_locks import KeyedLocks
from bot.platform_health import PlatformHealth
from bot.reconnect import Backoff
from bot.slack import commands as slack_commands
from bot.slack.app import EVENTS_PATH, SlackApp, build_app, http_web_app, serve
from bot.slack.commands import parse_grant_args
from bot.slack.grants import SlackUserGroupGrants
from bot.slack.links import parse_mention, parse_order_number, parse_thread_link
from bot.slack.render import APPROVE_ACTION_ID, DECISION_BLOCK_ID, DENY_ACTION_ID, escape
from bot.slack.settings import SlackSettings
from bot.slack.web_client import KeptAliveWebClient
from harness import free_port, port_accepts
from harness.conditions import wait_for
from harness.fakes.slack_api import (
    Delivery,
    FakeSlackApi,
    JsonDict,
    SlackSender,
    signed_headers,
)
from harness.recording_router import RecordingRouter
from tests.support.customer_text import hostile_status
from tests.support.slack_app import (
    ADMIN,
    CHANNEL,
    OTHER_CHANNEL,
    SECRET,
    SUPPORT,
    TEAM,
    RecordingCommands,
    posted_escalation,
    settings_for,
)

# ---------------------------------------------------------------------------------------------
# The app in process, its router and commands recording
# ---------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _earlier_garbage_collected() -> None:
    """What earlier tests left for the collector is collected before this test's log is read:
    asyncio reports an unclosed aiohttp session when it is collected, in whichever test that is."""
    gc.collect()


@dataclass
class Harness:
    slack: FakeSlackApi
    sender: SlackSender
    app: SlackApp
    router: RecordingRouter
    commands: RecordingCommands
    finder_calls: list[tuple[str, str]]

    async def deliver(self, delivery: Delivery, **sign: Any) -> BoltResponse:
        headers = signed_headers(SECRET, delivery, **sign)
        return await self.app.async_dispatch(
            AsyncBoltRequest(body=delivery.body, headers=dict(headers))
        )

    async def command(self, command: str, text: str = "", user: tuple[str, str] = ADMIN) -> str:
        before = len(self.slack.responses)
        response = await self.deliver(
            self.sender.command(command, text, user=user[0], name=user[1])
        )
        assert response.status == 200 and response.body == ""  # the bare ack

        async def answered() -> bool:
            return len(self.slack.responses) > before

        await wait_for(answered, timeout=5, what=f"the answer to {command}")
        (answer,) = self.slack.responses[before:]
        assert answer["response_type"] == "ephemeral" and answer["kind"] == "commands"
        return answer["text"]


@pytest.fixture
async def slack(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeSlackApi]:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with FakeSlackApi(team_id=TEAM, channels_without_bot=["C0NOBOT"]) as fake:
        yield fake


@pytest.fixture
async def harness(slack: FakeSlackApi) -> AsyncIterator[Harness]:
    router, commands = RecordingRouter(), RecordingCommands()
    finder_calls: list[tuple[str, str]] = []

    async def find_by_order(team_id: str, order: str) -> str | None:
        finder_calls.append((team_id, order))
        return f"slack-{team_id}-{CHANNEL}-1732860000.000100" if order == "4500" else None

    app = build_app(
        settings_for(slack),
        router,
        commands,  # a RecordingCommands
        find_by_order=find_by_order,
    )
    yield Harness(slack, SlackSender(slack), app, router, commands, finder_calls)
    assert isinstance(app.client, KeptAliveWebClient)  # build_app's
    await app.client.close()


async def routed_messages(h: Harness, count: int) -> list[InboundMessage]:
    async def enough() -> bool:
        return len(h.router.messages) >= count

    await wait_for(enough, timeout=5, what=f"{count} routed messages")
    return h.router.messages


# ---------------------------------------------------------------------------------------------
# Customer messages
# ---------------------------------------------------------------------------------------------


async def test_root_message_opens_the_thread_after_the_ack(harness: Harness) -> None:
    harness.router.gate = asyncio.Event()  # Temporal is slow: the router does not return
    delivery = harness.sender.post(CHANNEL, "please refund order 1234")
    root_ts = delivery.payload["event"]["ts"]

    response = await asyncio.wait_for(harness.deliver(delivery), timeout=2)

    assert response.status == 200  # acknowledged while the router is still waiting
    assert harness.router.messages == []
    harness.router.gate.set()
    (message,) = await routed_messages(harness, 1)
    assert message.opens_thread is True
    assert message.thread == ThreadRef(
        platform="slack", workspace=TEAM, channel=CHANNEL, thread=root_ts
    )
    assert message.event_id == delivery.payload["event_id"]
    assert message.message_id == root_ts
    assert message.author == Actor(platform="slack", user_id="U0CUSTOMER", display_name="nyghtowl")
    assert message.text == "please refund order 1234"
    assert not message.from_bot and not message.edited_or_deleted
    assert workflow_id_for(message.thread) == f"slack-{TEAM}-{CHANNEL}-{root_ts}"
    assert harness.slack.calls_to("chat.postMessage") == []  # STARTED: nothing to say


async def test_thread_replies_become_signals_on_the_root(harness: Harness) -> None:
    root = harness.sender.post(CHANNEL, "refund 1234 please")
    root_ts = root.payload["event"]["ts"]
    reply = harness.sender.post(CHANNEL, "Yes", thread_ts=root_ts)
    broadcast = harness.sender.post(
        CHANNEL, "Split seam", thread_ts=root_ts, subtype="thread_broadcast"
    )
    for delivery in (root, reply, broadcast):
        assert (await harness.deliver(delivery)).status == 200

    _, *replies = await routed_messages(harness, 3)
    assert [m.text for m in replies] == ["Yes", "Split seam"]
    for message, delivery in zip(replies, (reply, broadcast), strict=True):
        assert message.opens_thread is False
        assert message.thread.thread == root_ts  # the thread, not the reply's own ts
        assert message.message_id == delivery.payload["event"]["ts"]
        assert message.event_id == delivery.payload["event_id"]


async def test_bots_edits_notices_and_other_channels_reach_nothing(harness: Harness) -> None:
    root = harness.sender.post(CHANNEL, "refund 1234")
    root_ts = root.payload["event"]["ts"]
    await harness.deliver(root)
    await routed_messages(harness, 1)
    answer = harness.sender.post(CHANNEL, "Yes", thread_ts=root_ts)
    answer_ts = answer.payload["event"]["ts"]
    own_bot = harness.sender.bot_post(
        CHANNEL,
        "Was the package opened?",
        thread_ts=root_ts,
        bot_id=harness.slack.bot_id,
        user=harness.slack.bot_user_id,
    )

    ignored = [
        harness.sender.bot_post(CHANNEL, "another app talks", thread_ts=root_ts),
        harness.sender.bot_post(CHANNEL, "legacy integration", legacy=True),
        own_bot,
        harness.sender.edit(CHANNEL, answer_ts, "No"),
        harness.sender.delete(CHANNEL, answer_ts),
        harness.sender.join(CHANNEL),
        harness.sender.post(OTHER_CHANNEL, "refund order 4500 please"),
        harness.sender.post(OTHER_CHANNEL, "a reply elsewhere", thread_ts=root_ts),
    ]
    for delivery in ignored:
        assert (await harness.deliver(delivery)).status == 200

    # A sentinel after them: once it is routed, every earlier listener has run its filter.
    await harness.deliver(harness.sender.post(CHANNEL, "sentinel", thread_ts=root_ts))
    messages = await routed_messages(harness, 2)
    await asyncio.sleep(0)  # let any stray listener task take one more step
    assert [m.text for m in messages] == ["refund 1234", "sentinel"]
    assert harness.slack.calls_to("chat.postMessage") == []


async def test_one_threads_messages_are_routed_in_arrival_order(harness: Harness) -> None:
    root = harness.sender.post(CHANNEL, "refund 1234")
    root_ts = root.payload["event"]["ts"]
    harness.router.gate, harness.router.slow_text = asyncio.Event(), "first"  # a slow signal
    first = harness.sender.post(CHANNEL, "first", thread_ts=root_ts)
    second = harness.sender.post(CHANNEL, "second", thread_ts=root_ts)
    elsewhere = harness.sender.post(CHANNEL, "another thread")
    for delivery in (first, second, elsewhere):
        assert (await harness.deliver(delivery)).status == 200
    # Another thread is not held up; this thread's second message waits for its first.
    assert [m.text for m in await routed_messages(harness, 1)] == ["another thread"]
    harness.router.gate.set()
    messages = await routed_messages(harness, 3)
    assert [m.text for m in messages] == ["another thread", "first", "second"]


@pytest.mark.parametrize("routed", [Routed.QUEUED, Routed.CLOSED])
async def test_notice_goes_into_the_thread(harness: Harness, routed: Routed) -> None:
    harness.router.message_result = routed
    root = harness.sender.post(CHANNEL, "refund 1234")
    root_ts = root.payload["event"]["ts"]
    await harness.deliver(harness.sender.post(CHANNEL, "Yes", thread_ts=root_ts))

    async def posted() -> list:
        return harness.slack.calls_to("chat.postMessage")

    (call,) = await wait_for(posted, timeout=5, what="the notice")
    assert call.params["channel"] == CHANNEL and call.params["thread_ts"] == root_ts
    assert call.params["text"] == NOTICES[routed]


# ---------------------------------------------------------------------------------------------
# Retries and repeated event ids, with the real router's dedup (Temporal faked at its edge)
# ---------------------------------------------------------------------------------------------


@dataclass
class EdgeTemporal:
    """A Temporal client at its network edge: records starts, signals and Updates; can fail
    once."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    fail_next: bool = False
    gate: asyncio.Event | None = None  # while set and not yet open, starts wait: Temporal is slow

    def _maybe_fail(self) -> None:
        if self.fail_next:
            self.fail_next = False
            # Not "unreachable": a failure of this one request.
            raise RPCError("internal error", RPCStatusCode.INTERNAL, b"")

    async def start_workflow(self, _run: Any, _start: Any, **kwargs: Any) -> SimpleNamespace:
        if self.gate is not None:
            await self.gate.wait()
        self._maybe_fail()
        assert kwargs["id_reuse_policy"] == WorkflowIDReusePolicy.REJECT_DUPLICATE
        new = ("start", kwargs["id"]) not in self.calls
        self.calls.append(("start", kwargs["id"]))
        # Temporal's answer (signal-with-start): whether this call started the run.
        return SimpleNamespace(_start_workflow_response=SimpleNamespace(started=new))

    def get_workflow_handle(self, workflow_id: str) -> Any:
        async def signal(method: Callable[..., None], _arg: Any, rpc_timeout: Any = None) -> None:
            self._maybe_fail()
            self.calls.append((method.__name__, workflow_id))

        async def start_update(method: Callable[..., None], _arg: Any, **_kwargs: Any) -> None:
            # A reply goes as the Update, accepted at once here: a Worker is polling.
            self._maybe_fail()
            self.calls.append((method.__name__, workflow_id))

        return SimpleNamespace(signal=signal, start_update=start_update)


@pytest.fixture
async def real_router_app(
    slack: FakeSlackApi, tmp_path: Any
) -> tuple[AsyncApp, EdgeTemporal, SlackSender, ConversationRouter]:
    temporal = EdgeTemporal()

    async def hold() -> bool:
        return False

    router = ConversationRouter(
        temporal,  # type: ignore[arg-type]  # for temporalio's Client
        "refund-bot",
        Inbox(SqliteDatabase(tmp_path)),
        hold,
        RecentEvents(),
        inbox_retry=Backoff(first=0, cap=0, jitter=False),  # the inbox may retry at once
    )
    app = build_app(settings_for(slack), router, RecordingCommands())
    return app, temporal, SlackSender(slack), router


async def _dispatch(app: AsyncApp, delivery: Delivery, **sign: Any) -> BoltResponse:
    headers = signed_headers(SECRET, delivery, **sign)
    return await app.async_dispatch(AsyncBoltRequest(body=delivery.body, headers=dict(headers)))


async def test_a_retry_after_acceptance_is_applied_once(real_router_app) -> None:
    app, temporal, sender, _ = real_router_app
    root = sender.post(CHANNEL, "refund 1234")
    reply = sender.post(CHANNEL, "Yes", thread_ts=root.payload["event"]["ts"])
    # Back to back: the thread's messages are still routed in arrival order.
    await _dispatch(app, root)
    await _dispatch(app, reply)

    async def two() -> bool:
        return len(temporal.calls) == 2

    await wait_for(two, timeout=5, what="start and signal")
    # Slack did not see our 200 in time and resends both, with the same event ids.
    assert (await _dispatch(app, reply, retry_num=1)).status == 200
    assert (await _dispatch(app, root, retry_num=2, retry_reason="http_error")).status == 200
    sentinel = sender.post(CHANNEL, "sentinel", thread_ts=root.payload["event"]["ts"])
    await _dispatch(app, sentinel)

    async def three() -> bool:
        return len(temporal.calls) == 3

    await wait_for(three, timeout=5, what="the sentinel's signal")
    wid = workflow_id_for(
        ThreadRef(
            platform="slack", workspace=TEAM, channel=CHANNEL, thread=root.payload["event"]["ts"]
        )
    )
    reply_update = "customer_message_now"
    assert temporal.calls == [("start", wid), (reply_update, wid), (reply_update, wid)]


async def test_an_acked_message_whose_delivery_fails_is_kept_and_delivered_once(
    real_router_app, slack: FakeSlackApi
) -> None:
    app, temporal, sender, router = real_router_app
    root = sender.post(CHANNEL, "refund 1234")
    temporal.fail_next = True
    # Acked at once; then the router's start fails. Slack will not send the event again on its own
    # (in Socket Mode never), so the router keeps it rather than hand the failure back.
    assert (await _dispatch(app, root)).status == 200

    async def told() -> list[JsonDict]:
        return [m for m in slack.thread(CHANNEL, root.payload["event"]["ts"]) if m.get("bot_id")]

    [notice] = await wait_for(told, timeout=5, what="the customer told it is kept")
    assert notice["text"] == NOTICES[Routed.QUEUED]
    assert temporal.calls == [] and not temporal.fail_next
    # Slack's own retry of the same event changes nothing: it was accepted when it was kept.
    assert (await _dispatch(app, root, retry_num=1)).status == 200
    assert await router.deliver_pending() == 1
    assert [kind for kind, _ in temporal.calls] == ["start"]
    assert await router.deliver_pending() == 0 and [k for k, _ in temporal.calls] == ["start"]


@asynccontextmanager
async def _over_http(app: AsyncApp) -> AsyncIterator[Callable[..., Any]]:
    """The app behind http_web_app on a loopback port: yields post(delivery, **sign) -> status."""
    runner = aiohttp.web.AppRunner(http_web_app(app, SECRET))  # type: ignore[arg-type]
    await runner.setup()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}{EVENTS_PATH}"
    try:
        async with aiohttp.ClientSession() as http:

            async def post(delivery: Delivery, **sign: Any) -> int:
                headers = signed_headers(SECRET, delivery, **sign)
                async with http.post(url, data=delivery.body, headers=headers) as resp:
                    return resp.status

            yield post
    finally:
        await runner.cleanup()


async def test_a_message_is_committed_to_the_inbox_before_slack_hears_ok(
    real_router_app, tmp_path: Path
) -> None:
    app, temporal, sender, _ = real_router_app
    temporal.gate = asyncio.Event()  # Temporal takes its time: delivery is still under way
    root = sender.post(CHANNEL, "refund 1234")
    async with _over_http(app) as post:
        assert await post(root) == 200
        # What the 200 promises, read back from the database file by a second reader.
        (entry,) = await Inbox(SqliteDatabase(tmp_path)).pending()
        assert entry.kind == "start" and temporal.calls == []
        assert "refund 1234" in entry.payload
        temporal.gate.set()

        async def delivered() -> bool:
            return temporal.calls != [] and await Inbox(SqliteDatabase(tmp_path)).size() == 0

        await wait_for(delivered, timeout=5, what="the kept message delivered")
        # Slack's retry of it (our 200 came late) is the same event: nothing new.
        assert await post(root, retry_num=1) == 200
    assert [kind for kind, _ in temporal.calls] == ["start"]


async def test_the_bots_own_messages_are_acknowledged_and_open_nothing(
    real_router_app, tmp_path: Path
) -> None:
    """Reproduces a signed message event from the bot's own user (no `bot_id` on it) kept at the
    ack and delivered by the inbox: it opened a conversation, and the bot asked itself which
    order to refund (bolt's self-event filter runs after the edge has kept the message)."""
    app, temporal, sender, router = real_router_app
    bot_user = sender.slack.bot_user_id
    own_root = sender.post(CHANNEL, "Which order would you like refunded?", user=bot_user)
    customer = sender.post(CHANNEL, "refund 1234")
    thread = customer.payload["event"]["ts"]
    own_reply = sender.post(CHANNEL, "Was the package opened?", user=bot_user, thread_ts=thread)
    # After them, the customer's answer: once it is delivered, so is anything kept before it.
    answer = sender.post(CHANNEL, "Yes", thread_ts=thread)
    wid = workflow_id_for(
        ThreadRef(platform="slack", workspace=TEAM, channel=CHANNEL, thread=thread)
    )
    async with _over_http(app) as post:
        for delivery in (own_root, customer, own_reply, answer):
            assert await post(delivery) == 200

        async def answered() -> bool:
            await router.deliver_pending()  # the inbox's own delivery, as the bot runs it
            return await Inbox(SqliteDatabase(tmp_path)).size() == 0

        await wait_for(answered, timeout=5, what="the customer's answer delivered")
    # One conversation, the customer's: started, then answered (as an Update or a Signal).
    assert [call[1] for call in temporal.calls] == [wid, wid], temporal.calls
    assert temporal.calls[0] == ("start", wid)
    assert sender.slack.calls_to("auth.test") != []  # who the bot is, as Slack names it


async def test_a_message_that_cannot_be_kept_is_not_acknowledged(harness: Harness) -> None:
    harness.router.keep_error = OSError("disk full")  # the inbox cannot be written
    root = harness.sender.post(CHANNEL, "refund 1234")
    async with _over_http(harness.app) as post:
        # Not a 200: Slack sends it again, rather than the bot forgetting what it acknowledged.
        assert await post(root) == 503
        assert harness.router.arrived == [] and harness.router.kept == []
        harness.router.keep_error = None
        assert await post(root, retry_num=1) == 200
    (message,) = await routed_messages(harness, 1)
    assert [m.event_id for m in harness.router.kept] == [message.event_id]


async def test_a_message_the_router_cannot_even_keep_is_answered(harness: Harness) -> None:
    harness.router.message_error = OSError("disk full")  # the inbox cannot be written
    root = harness.sender.post(CHANNEL, "refund 1234")
    assert (await harness.deliver(root)).status == 200

    async def told() -> list[JsonDict]:
        ts = root.payload["event"]["ts"]
        return [m for m in harness.slack.thread(CHANNEL, ts) if m.get("bot_id")]

    [notice] = await wait_for(told, timeout=5, what="the customer asked to send it again")
    assert notice["text"] == NOT_KEPT


# ---------------------------------------------------------------------------------------------
# Request signatures
# ---------------------------------------------------------------------------------------------


async def test_forged_and_stale_requests_get_401_and_reach_nothing(harness: Harness) -> None:
    delivery = harness.sender.post(CHANNEL, "refund order 4500")
    forged = signed_headers("not-the-secret", delivery)
    stale = signed_headers(SECRET, delivery, timestamp=int(time.time()) - 6 * 60)
    unsigned = {"Content-Type": delivery.content_type}
    command = harness.sender.command(
        "/refund-grant", "<@U0EVE|eve> admin", user="U0EVE", name="eve"
    )
    for body, headers in (
        (delivery.body, forged),
        (delivery.body, stale),
        (delivery.body, unsigned),
        (delivery.body.replace("4500", "4501"), signed_headers(SECRET, delivery)),  # tampered
        (command.body, signed_headers("not-the-secret", command)),
    ):
        response = await harness.app.async_dispatch(
            AsyncBoltRequest(body=body, headers=dict(headers))
        )
        assert response.status == 401
    await harness.deliver(harness.sender.post(CHANNEL, "sentinel"))
    messages = await routed_messages(harness, 1)
    assert [m.text for m in messages] == ["sentinel"]
    assert harness.commands.calls == [] and harness.slack.responses == []


async def test_http_mode_serves_slack_events_over_real_http(harness: Harness) -> None:
    runner = aiohttp.web.AppRunner(http_web_app(harness.app, SECRET))
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    challenge = {
        "token": "x",
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
        "type": "url_verification",
    }
    verification = Delivery(json.dumps(challenge), "application/json", challenge)
    try:
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{port}/slack/events"
            headers = signed_headers(SECRET, verification)
            async with http.post(url, data=verification.body, headers=headers) as resp:
                assert resp.status == 200
                assert (await resp.json())["challenge"] == challenge["challenge"]
            async with http.post(
                url,
                data=verification.body,
                headers={**headers, "X-Slack-Signature": "v0=" + "0" * 64},
            ) as resp:
                assert resp.status == 401
            async with http.get(url) as resp:
                assert resp.status == 405
    finally:
        await runner.cleanup()


async def test_serve_in_http_mode_until_cancelled(harness: Harness) -> None:
    settings = settings_for(harness.slack, port=free_port())
    serving = asyncio.create_task(serve(harness.app, settings))
    url = f"http://127.0.0.1:{settings.port}/slack/events"
    challenge = {"token": "x", "challenge": "c-123", "type": "url_verification"}
    verification = Delivery(json.dumps(challenge), "application/json", challenge)
    async with aiohttp.ClientSession() as http:

        async def answered() -> int | None:
            try:
                headers = signed_headers(SECRET, verification)
                async with http.post(url, data=verification.body, headers=headers) as resp:
                    return resp.status
            except aiohttp.ClientConnectionError:
                return None  # not listening yet

        assert await wait_for(answered, timeout=10, what="the HTTP server") == 200
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
        assert await answered() is None  # the port is closed again


async def test_the_app_keeps_one_connection_to_slack_until_serve_ends(harness: Harness) -> None:
    harness.router.message_result = Routed.QUEUED  # the reply gets a notice: a Web API call
    port = free_port()
    serving = asyncio.create_task(serve(harness.app, settings_for(harness.slack, port=port)))
    # serve listens once its auth.test has returned: that call is over, its connection idle.
    await wait_for(lambda: port_accepts(port), timeout=10, what="serve listening")
    root_ts = harness.sender.post(CHANNEL, "refund 1234").payload["event"]["ts"]
    await harness.deliver(harness.sender.post(CHANNEL, "Yes", thread_ts=root_ts))

    async def noticed() -> list:
        return harness.slack.calls_to("chat.postMessage")

    await wait_for(noticed, timeout=5, what="the notice")
    # serve's auth.test by the app's client, then bolt's own (its authorization, before the ack)
    # and the notice by the client bolt built for the request, one after another: one connection.
    methods = [call.method for call in harness.slack.calls]
    assert methods == ["auth.test", "auth.test", "chat.postMessage"]
    assert len({call.connection for call in harness.slack.calls}) == 1
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving

    async def closed() -> bool:
        return harness.slack.open_connections() == 0

    await wait_for(closed, timeout=5, what="the app's connection to close with serve")


async def test_serve_in_socket_mode_acks_envelopes_before_the_work(harness: Harness) -> None:
    slack = harness.slack
    settings = settings_for(slack, app_token=slack.app_token, signing_secret=None)
    gate = asyncio.Event()
    router = RecordingRouter(gate=gate)  # Temporal is slow
    commands = RecordingCommands()
    app = build_app(settings, router, commands)
    serving = asyncio.create_task(serve(app, settings))
    try:

        async def connected() -> bool:
            return slack.socket_connections == 1

        await wait_for(connected, timeout=10, what="the Socket Mode connection")
        (opened,) = slack.calls_to("apps.connections.open")
        assert opened.status == 200 and opened.error is None  # with the app-level token

        async def acked(envelope_id: str) -> JsonDict | None:
            return next((a for a in slack.socket_acks if a["envelope_id"] == envelope_id), None)

        delivery = harness.sender.post(CHANNEL, "please refund order 1234")
        event = await slack.socket_send("events_api", delivery.payload)
        assert await wait_for(lambda: acked(event), timeout=5, what="the event's ack")
        assert router.messages == []  # acknowledged while the router still waits
        gate.set()
        (message,) = await routed_messages(
            Harness(slack, harness.sender, app, router, commands, []), 1
        )
        assert message.opens_thread and message.event_id == delivery.payload["event_id"]

        command = harness.sender.command("/crash-worker", user=ADMIN[0], name=ADMIN[1])
        envelope = await slack.socket_send("slash_commands", command.payload)
        assert await wait_for(lambda: acked(envelope), timeout=5, what="the command's ack")

        async def answered() -> list[JsonDict]:
            return slack.responses

        (answer,) = await wait_for(answered, timeout=5, what="the command's answer")
        assert answer["text"] == "crash_worker done" and answer["response_type"] == "ephemeral"
    finally:
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving

    async def closed() -> bool:
        return slack.socket_connections == 0

    await wait_for(closed, timeout=5, what="the socket closed")


async def test_socket_mode_does_not_ack_a_message_it_cannot_keep(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    slack = harness.slack
    settings = settings_for(slack, app_token=slack.app_token, signing_secret=None)
    router = RecordingRouter(keep_error=OSError("disk full"))  # the inbox cannot be written
    app = build_app(settings, router, RecordingCommands())
    serving = asyncio.create_task(serve(app, settings))
    try:

        async def connected() -> bool:
            return slack.socket_connections == 1

        await wait_for(connected, timeout=10, what="the Socket Mode connection")
        delivery = harness.sender.post(CHANNEL, "please refund order 1234")
        refused = await slack.socket_send("events_api", delivery.payload)

        async def logged() -> bool:
            return "could not be kept" in caplog.text

        await wait_for(logged, timeout=5, what="the refusal logged")
        acked = {a["envelope_id"] for a in slack.socket_acks}
        assert refused not in acked and router.arrived == []  # Slack sends it again
        router.keep_error = None
        again = await slack.socket_send("events_api", delivery.payload, retry_attempt=1)

        async def acked_again() -> bool:
            return again in {a["envelope_id"] for a in slack.socket_acks}

        await wait_for(acked_again, timeout=5, what="the resent envelope's ack")
        (message,) = await routed_messages(
            Harness(slack, harness.sender, app, router, RecordingCommands(), []), 1
        )
        assert [m.event_id for m in router.kept] == [message.event_id]
    finally:
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving


QUICK = Backoff(first=0.05, cap=0.2, jitter=False)


@asynccontextmanager
async def serving(
    app: SlackApp, settings: SlackSettings, **kwargs: Any
) -> AsyncIterator[PlatformHealth]:
    """`serve` in a task, as `refund-bot run` runs it; cancelled at the end (health: stopped)."""
    health = PlatformHealth("slack")
    task = asyncio.create_task(serve(app, settings, health, backoff=QUICK, **kwargs))
    try:
        yield health
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert health.state == "stopped"


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_refused_app_token_is_one_line_and_slack_down(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    slack = harness.slack
    settings = settings_for(slack, app_token="xapp-1-A0FAKE-0000-wrong", signing_secret=None)
    app = build_app(settings, harness.router, harness.commands)
    async with serving(app, settings) as health:
        await wait_for(lambda: health.state == "down", what="Slack down")
        assert health.detail.startswith(
            "Slack refused SLACK_APP_TOKEN (apps.connections.open: invalid_auth)"
        )
        [line] = warnings(caplog)
        assert line.name == "bot.reconnect" and line.levelno == logging.ERROR
        assert line.exc_info is None and "\n" not in line.getMessage()
        assert [c.error for c in slack.calls_to("apps.connections.open")] == ["invalid_auth"]
        assert slack.socket_connections == 0
    assert "wrong" not in caplog.text


async def test_a_refused_bot_token_is_one_line_and_slack_down(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(harness.slack, bot_token="xoxb-not-this-one", port=free_port())
    app = build_app(settings, harness.router, harness.commands)
    async with serving(app, settings) as health:
        await wait_for(lambda: health.state == "down", what="Slack down")
        assert health.detail.startswith("Slack refused SLACK_BOT_TOKEN (auth.test: invalid_auth)")
        [line] = warnings(caplog)
        assert line.exc_info is None and "SLACK_BOT_TOKEN" in line.getMessage()
    assert "not-this-one" not in caplog.text


async def test_a_port_that_cannot_be_bound_is_one_line_and_slack_down(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = settings_for(harness.slack, port=port)
        async with serving(harness.app, settings) as health:
            await wait_for(lambda: health.state == "down", what="Slack down")
            assert health.detail.startswith(
                f"cannot listen on port {port} (Address already in use)"
            )
            assert "SLACK_PORT" in health.detail
            [line] = warnings(caplog)
            assert line.exc_info is None and line.levelno == logging.ERROR


async def test_slack_unreachable_is_retrying_with_one_line_each(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(
        harness.slack, api_url=f"http://127.0.0.1:{free_port()}/api/", port=free_port()
    )
    app = build_app(settings, harness.router, harness.commands)
    async with serving(app, settings) as health:
        await wait_for(lambda: health.failures >= 3, what="three failed attempts")
        assert health.state == "retrying" and "Cannot connect to host" in health.detail
    lines = warnings(caplog)
    assert len(lines) >= 3 and all(r.exc_info is None for r in lines)
    assert {r.name for r in lines} == {"bot.reconnect"}


async def test_socket_mode_connects_again_when_slack_drops_it(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    slack = harness.slack
    settings = settings_for(slack, app_token=slack.app_token, signing_secret=None)
    app = build_app(settings, harness.router, harness.commands)
    async with serving(app, settings, ping_interval=0.5) as health:
        await wait_for(lambda: health.ok and slack.socket_connections == 1, what="connected")
        await slack.close_sockets()
        await wait_for(lambda: health.state == "retrying", what="the drop noticed")
        assert health.detail == "ConnectionLost: the Socket Mode connection closed"
        await wait_for(lambda: health.ok and slack.socket_connections == 1, what="connected again")
        assert len(slack.calls_to("apps.connections.open")) == 2  # a fresh URL: one use each

        delivery = harness.sender.post(CHANNEL, "please refund order 1234")
        envelope = await slack.socket_send("events_api", delivery.payload)

        async def acked() -> bool:
            return any(a["envelope_id"] == envelope for a in slack.socket_acks)

        await wait_for(acked, what="the envelope acked on the new connection")
        await routed_messages(harness, 1)
    [line] = warnings(caplog)
    assert line.name == "bot.reconnect" and line.exc_info is None


# ---------------------------------------------------------------------------------------------
# Approve / Deny
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action_id", "decision", "verb"),
    [(APPROVE_ACTION_ID, "approve", "Approved"), (DENY_ACTION_ID, "deny", "Denied")],
)
async def test_click_acks_removes_the_buttons_and_signals(
    harness: Harness, action_id: str, decision: str, verb: str
) -> None:
    root_ts, escalation_ts, wid = await posted_escalation(harness.slack)
    click = harness.sender.click(
        CHANNEL, escalation_ts, action_id, user=SUPPORT[0], name=SUPPORT[1]
    )

    response = await harness.deliver(click)
    assert response.status == 200 and response.body == ""

    async def clicked() -> list[InboundClick]:
        return harness.router.clicks

    (inbound,) = await wait_for(clicked, timeout=5, what="the click")
    assert inbound.workflow_id == wid and inbound.decision == decision
    assert inbound.round is None  # buttons from before escalation rounds still route
    assert inbound.actor == Actor(platform="slack", user_id=SUPPORT[0], display_name=SUPPORT[1])
    assert inbound.click_id == click.payload["actions"][0]["action_ts"]
    assert inbound.event_id.endswith(click.payload["trigger_id"])

    (update,) = harness.slack.calls_to("chat.update")
    assert harness.slack.calls.index(update) < len(harness.slack.calls)
    assert update.params["channel"] == CHANNEL and update.params["ts"] == escalation_ts
    message = harness.slack.message(CHANNEL, escalation_ts)
    assert message is not None and message["thread_ts"] == root_ts
    assert [b["type"] for b in message["blocks"]] == ["section", "context"]
    assert message["blocks"][0]["text"]["text"].startswith("This refund needs a support agent")
    context = message["blocks"][-1]
    assert context["block_id"] == DECISION_BLOCK_ID
    assert context["elements"][0]["text"] == f"{verb} by <@{SUPPORT[0]}>, checking authorization"
    with pytest.raises(AssertionError, match="no refund_"):  # nothing left to press twice
        harness.sender.click(CHANNEL, escalation_ts, action_id, user=SUPPORT[0], name=SUPPORT[1])


async def test_click_carries_the_round_of_its_buttons(harness: Harness) -> None:
    _, escalation_ts, wid = await posted_escalation(harness.slack, round=3)
    click = harness.sender.click(
        CHANNEL, escalation_ts, APPROVE_ACTION_ID, user=SUPPORT[0], name=SUPPORT[1]
    )
    assert click.payload["actions"][0]["value"] == f"{wid}#3"
    await harness.deliver(click)

    async def clicked() -> list[InboundClick]:
        return harness.router.clicks

    (inbound,) = await wait_for(clicked, timeout=5, what="the click")
    assert (inbound.workflow_id, inbound.round) == (wid, 3)


async def test_click_on_a_passed_round_is_sent_once_for_the_workflow_to_answer(
    harness: Harness,
) -> None:
    """Nothing asks the Workflow first whether round 1 is still open: the click is marked and
    routed like any other, one Signal. The Workflow drops a click whose round has passed and edits
    that round's message again with its outcome (tests/test_rounds.py); a finished conversation
    is the router's CLOSED (test_click_on_a_finished_conversation_tells_the_clicker)."""
    root_ts, escalation_ts, wid = await posted_escalation(harness.slack, round=1)
    await harness.deliver(
        harness.sender.click(CHANNEL, escalation_ts, APPROVE_ACTION_ID, user=SUPPORT[0], name="sam")
    )

    async def clicked() -> list[InboundClick]:
        return harness.router.clicks

    (click,) = await wait_for(clicked, timeout=5, what="the click")
    assert (click.workflow_id, click.round) == (wid, 1)
    (update,) = harness.slack.calls_to("chat.update")
    assert update.params["ts"] == escalation_ts
    message = harness.slack.message(CHANNEL, escalation_ts)
    assert message is not None and message["thread_ts"] == root_ts
    assert message["blocks"][-1]["elements"][0]["text"] == (
        "Approved by <@U0SAM>, checking authorization"
    )
    assert harness.slack.ephemerals == []  # SIGNALLED: the thread says what became of it


async def test_click_whose_value_names_another_thread_is_dropped(harness: Harness) -> None:
    _, escalation_ts, _ = await posted_escalation(harness.slack)
    click = harness.sender.click(
        CHANNEL, escalation_ts, APPROVE_ACTION_ID, user="U0EVE", name="eve"
    )
    payload = click.payload
    payload["actions"][0]["value"] = f"slack-{TEAM}-{CHANNEL}-1111111111.000100"
    from urllib.parse import quote_plus

    tampered = Delivery("payload=" + quote_plus(json.dumps(payload)), click.content_type, payload)
    assert (await harness.deliver(tampered)).status == 200
    # A genuine click afterwards is routed; the tampered one never was.
    _, other_ts, wid = await posted_escalation(harness.slack)
    await harness.deliver(
        harness.sender.click(CHANNEL, other_ts, APPROVE_ACTION_ID, user=SUPPORT[0], name=SUPPORT[1])
    )

    async def clicked() -> list[InboundClick]:
        return harness.router.clicks

    (inbound,) = await wait_for(clicked, timeout=5, what="the genuine click")
    assert inbound.workflow_id == wid


async def test_click_on_a_finished_conversation_tells_the_clicker(harness: Harness) -> None:
    harness.router.click_result = Routed.CLOSED
    root_ts, escalation_ts, _ = await posted_escalation(harness.slack)
    await harness.deliver(
        harness.sender.click(CHANNEL, escalation_ts, APPROVE_ACTION_ID, user=SUPPORT[0], name="sam")
    )

    async def told() -> list:
        return harness.slack.ephemerals

    (ephemeral,) = await wait_for(told, timeout=5, what="the ephemeral notice")
    assert ephemeral["user"] == SUPPORT[0] and ephemeral["thread_ts"] == root_ts
    assert "already finished" in ephemeral["text"]
    message = harness.slack.message(CHANNEL, escalation_ts)
    assert message is not None
    assert message["blocks"][-1]["elements"][0]["text"] == (
        "Approved by <@U0SAM>: This conversation has already finished; your click changed nothing."
    )


def _with_grants(harness: Harness, grants: Any) -> Harness:
    """The same harness, its app built with a live grant source for the click pre-check."""
    app = build_app(
        settings_for(harness.slack),
        harness.router,
        harness.commands,
        grants=grants,
    )
    return Harness(
        harness.slack, harness.sender, app, harness.router, harness.commands, harness.finder_calls
    )


async def test_click_by_someone_who_may_not_decide_is_refused_privately(harness: Harness) -> None:
    sam_grant = Grant(
        grant_id=3,
        platform="slack",
        user_id=SUPPORT[0],
        role="refund_approver",
        limit_cents=100000,
        granted_at="2025-01-01T00:00:00+00:00",
        granted_by="slack:U0ADMIN",
    )
    store = StoreStub({(SUPPORT[0], "refund_approver"): sam_grant})
    h = _with_grants(harness, store)
    root_ts, escalation_ts, wid = await posted_escalation(h.slack)
    await h.deliver(
        h.sender.click(CHANNEL, escalation_ts, DENY_ACTION_ID, user="U0EVE", name="eve")
    )

    async def told() -> list:
        return h.slack.ephemerals

    (refusal,) = await wait_for(told, timeout=5, what="the refusal")
    assert refusal["user"] == "U0EVE" and refusal["thread_ts"] == root_ts
    assert refusal["text"] == (
        "Sorry eve, approving or denying a refund needs the refund_approver role, and you don't "
        "hold it. Nothing changed."
    )
    assert h.router.clicks == [] and h.slack.calls_to("chat.update") == []
    assert store.asked == [("U0EVE", "refund_approver")]

    # The buttons are still there for someone who may decide.
    await h.deliver(
        h.sender.click(CHANNEL, escalation_ts, APPROVE_ACTION_ID, user=SUPPORT[0], name="sam")
    )

    async def clicked() -> list[InboundClick]:
        return h.router.clicks

    (click,) = await wait_for(clicked, timeout=5, what="the approver's click")
    assert click.workflow_id == wid and click.actor.user_id == SUPPORT[0]
    assert len(h.slack.calls_to("chat.update")) == 1


@dataclass
class BrokenGrants:
    async def live_grant(self, actor: Actor, role: str) -> Grant | None:
        raise ConnectionError("grants store unreachable")


async def test_click_when_the_grants_cannot_be_read_changes_nothing(harness: Harness) -> None:
    h = _with_grants(harness, BrokenGrants())
    _, escalation_ts, _ = await posted_escalation(h.slack)
    await h.deliver(
        h.sender.click(CHANNEL, escalation_ts, APPROVE_ACTION_ID, user=SUPPORT[0], name="sam")
    )

    async def told() -> list:
        return h.slack.ephemerals

    (notice,) = await wait_for(told, timeout=5, what="the failure notice")
    assert "nothing changed" in notice["text"]
    assert h.router.clicks == [] and h.slack.calls_to("chat.update") == []


async def test_click_the_router_cannot_take_puts_the_buttons_back(harness: Harness) -> None:
    harness.router.click_error = RuntimeError("Temporal said no")
    _, escalation_ts, _ = await posted_escalation(harness.slack)
    before = harness.slack.message(CHANNEL, escalation_ts)
    await harness.deliver(
        harness.sender.click(CHANNEL, escalation_ts, APPROVE_ACTION_ID, user=SUPPORT[0], name="sam")
    )

    async def told() -> list:
        return harness.slack.ephemerals

    (notice,) = await wait_for(told, timeout=5, what="the failure notice")
    assert "try again" in notice["text"]
    updates = harness.slack.calls_to("chat.update")
    assert len(updates) == 2  # buttons off, then back on
    after = harness.slack.message(CHANNEL, escalation_ts)
    assert before is not None and after is not None and after["blocks"] == before["blocks"]


# ---------------------------------------------------------------------------------------------
# Slash commands
# ---------------------------------------------------------------------------------------------


async def test_crash_worker_answers_privately(harness: Harness) -> None:
    text = await harness.command("/crash-worker")
    assert text == "crash_worker done"
    ((name, (actor, host)),) = harness.commands.calls
    assert name == "crash_worker" and host is None
    assert actor == Actor(platform="slack", user_id=ADMIN[0], display_name=ADMIN[1])


async def test_crash_worker_names_a_host(harness: Harness) -> None:
    assert await harness.command("/crash-worker", "host-b") == "crash_worker done"
    assert [args[1] for _, args in harness.commands.calls] == ["host-b"]
    assert await harness.command("/crash-worker", "host-b host-c") == "Usage: /crash-worker [host]"
    assert len(harness.commands.calls) == 1


async def test_status_and_release_take_a_thread_link(harness: Harness) -> None:
    root_ts = harness.slack.add_message(CHANNEL, "refund 1234")
    reply_ts = harness.slack.add_message(CHANNEL, "Yes", thread_ts=root_ts)
    wid = f"slack-{TEAM}-{CHANNEL}-{root_ts}"
    reply_link = harness.sender.permalink(CHANNEL, reply_ts)
    assert "?thread_ts=" in reply_link

    assert await harness.command("/refund-status", reply_link) == "refund_status done"
    # With "escape links" on, Slack wraps a pasted link in <…>.
    await harness.command("/refund-release", f"<{harness.sender.permalink(CHANNEL, root_ts)}>")
    await harness.command("/refund-status", wid)  # the Workflow ID itself works too

    assert [(n, args[1]) for n, args in harness.commands.calls] == [
        ("refund_status", wid),
        ("refund_release", wid),
        ("refund_status", wid),
    ]


async def test_status_by_order_number(harness: Harness) -> None:
    assert await harness.command("/refund-status", "#4500") == "refund_status done"
    assert harness.finder_calls == [(TEAM, "4500")]
    assert harness.commands.calls[0][1][1] == f"slack-{TEAM}-{CHANNEL}-1732860000.000100"

    text = await harness.command("/refund-release", "9999")
    assert "No open conversation about order 9999" in text
    assert len(harness.commands.calls) == 1


@pytest.mark.parametrize(
    "text", ["", "   ", "the broken one", "https://evil.example/archives/C1/p1"]
)
async def test_status_without_a_conversation_explains_itself(harness: Harness, text: str) -> None:
    answer = await harness.command("/refund-status", text)
    assert "thread's link" in answer
    assert harness.commands.calls == []


async def test_queue_answers_privately(harness: Harness) -> None:
    assert await harness.command("/refund-queue", user=SUPPORT) == "refund_queue done"
    sam = Actor(platform="slack", user_id=SUPPORT[0], display_name=SUPPORT[1])
    assert harness.commands.calls == [("refund_queue", (sam,))]
    assert await harness.command("/refund-queue", "4500") == "Usage: /refund-queue"
    assert len(harness.commands.calls) == 1


async def test_takeover_and_handback_name_the_conversation_as_status_does(
    harness: Harness,
) -> None:
    root_ts = harness.slack.add_message(CHANNEL, "refund 1234")
    reply_ts = harness.slack.add_message(CHANNEL, "Yes", thread_ts=root_ts)
    wid = f"slack-{TEAM}-{CHANNEL}-{root_ts}"
    link = harness.sender.permalink(CHANNEL, reply_ts)

    assert await harness.command("/refund-takeover", link, SUPPORT) == "refund_takeover done"
    await harness.command("/refund-handback", f"<{link}>", SUPPORT)
    await harness.command("/refund-takeover", wid, SUPPORT)
    await harness.command("/refund-handback", "#4500", SUPPORT)  # by order number
    sam = Actor(platform="slack", user_id=SUPPORT[0], display_name=SUPPORT[1])
    by_order = f"slack-{TEAM}-{CHANNEL}-1732860000.000100"
    assert harness.commands.calls == [
        ("refund_takeover", (sam, wid, True)),
        ("refund_takeover", (sam, wid, False)),
        ("refund_takeover", (sam, wid, True)),
        ("refund_takeover", (sam, by_order, False)),
    ]
    assert harness.finder_calls == [(TEAM, "4500")]
    for command in ("/refund-takeover", "/refund-handback"):
        answer = await harness.command(command, "", SUPPORT)
        assert "thread's link" in answer and f"`{command} 4500`" in answer
    assert len(harness.commands.calls) == 4


async def test_hold_on_off_and_show(harness: Harness) -> None:
    for text in ("on", "OFF", ""):
        await harness.command("/refund-hold", text)
    assert "Usage" in await harness.command("/refund-hold", "maybe")
    assert [args[1] for _, args in harness.commands.calls] == [True, False, None]


async def test_grant_and_revoke_parse_slack_mentions(harness: Harness) -> None:
    await harness.command("/refund-grant", "<@U0SAM|sam> refund_approver $1,000")
    await harness.command("/refund-grant", "<@U0PAT> presenter")
    await harness.command("/refund-revoke", "<@U0SAM|sam> refund_approver")
    admin = Actor(platform="slack", user_id=ADMIN[0], display_name=ADMIN[1])
    assert harness.commands.calls == [
        (
            "refund_grant",
            (
                admin,
                Actor(platform="slack", user_id="U0SAM", display_name="sam"),
                "refund_approver",
                "$1,000",
            ),
        ),
        ("refund_grant", (admin, Actor(platform="slack", user_id="U0PAT"), "presenter", None)),
        (
            "refund_revoke",
            (
                admin,
                Actor(platform="slack", user_id="U0SAM", display_name="sam"),
                "refund_approver",
            ),
        ),
    ]
    assert "Usage" in await harness.command("/refund-grant", "@sam refund_approver")
    assert "Usage" in await harness.command("/refund-revoke", "<@U0SAM|sam> admin 500")
    assert len(harness.commands.calls) == 3


async def test_command_replies_are_escaped_and_failures_are_contained(harness: Harness) -> None:
    harness.commands.reply_text = "customer answers: damage: <!channel> & <@U0BOSS>"
    text = await harness.command("/crash-worker")
    assert text == "customer answers: damage: &lt;!channel&gt; &amp; &lt;@U0BOSS&gt;"
    harness.commands.fail = True
    text = await harness.command("/crash-worker")
    assert "failed on our side" in text and "boom" not in text


async def test_a_customers_answer_reaches_staff_as_the_characters_typed(harness: Harness) -> None:
    """Reproduces /refund-status showing a customer's answer raw: Slack rendered its bold for the
    staff member reading it (its `<…>` was escaped already)."""
    workflow_id = f"slack-{TEAM}-{CHANNEL}-1732860000.000100"
    harness.commands.reply_text = hostile_status(workflow_id).shown()
    text = await harness.command("/refund-status", workflow_id)
    assert text == escape(hostile_status(workflow_id).shown())
    assert (
        "customer answers: 1 (damage: `**bold** [click](https://evil) @everyone &lt;@123&gt; "
        "&lt;!channel&gt; # heading [31mred`)"
    ) in text.splitlines()


# ---------------------------------------------------------------------------------------------
# Message shortcuts
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("callback_id", "method"),
    [("refund_status", "refund_status"), ("refund_release", "refund_release")],
)
async def test_shortcut_on_any_message_of_the_thread(
    harness: Harness, callback_id: str, method: str
) -> None:
    root_ts = harness.slack.add_message(CHANNEL, "refund 1234")
    reply_ts = harness.slack.add_message(CHANNEL, "Yes", thread_ts=root_ts)
    for ts in (reply_ts, root_ts):
        shortcut = harness.sender.shortcut(CHANNEL, ts, callback_id, user=ADMIN[0], name=ADMIN[1])
        response = await harness.deliver(shortcut)
        assert response.status == 200 and response.body == ""

    async def both() -> bool:
        return len(harness.slack.ephemerals) == 2

    await wait_for(both, timeout=5, what="two ephemeral answers")
    wid = f"slack-{TEAM}-{CHANNEL}-{root_ts}"
    admin = Actor(platform="slack", user_id=ADMIN[0], display_name=ADMIN[1])
    assert harness.commands.calls == [(method, (admin, wid)), (method, (admin, wid))]
    for ephemeral in harness.slack.ephemerals:
        assert ephemeral["channel"] == CHANNEL and ephemeral["user"] == ADMIN[0]
        assert ephemeral["thread_ts"] == root_ts and ephemeral["text"] == f"{method} done"
    assert harness.slack.responses == []


@pytest.mark.parametrize(
    ("callback_id", "taken"), [("refund_takeover", True), ("refund_handback", False)]
)
async def test_take_over_and_hand_back_from_inside_the_thread(
    harness: Harness, callback_id: str, taken: bool
) -> None:
    root_ts = harness.slack.add_message(CHANNEL, "refund 1234")
    reply_ts = harness.slack.add_message(CHANNEL, "Yes", thread_ts=root_ts)
    shortcut = harness.sender.shortcut(
        CHANNEL, reply_ts, callback_id, user=SUPPORT[0], name=SUPPORT[1]
    )
    response = await harness.deliver(shortcut)
    assert response.status == 200 and response.body == ""

    async def answered() -> list:
        return harness.slack.ephemerals

    (ephemeral,) = await wait_for(answered, timeout=5, what="the private answer")
    sam = Actor(platform="slack", user_id=SUPPORT[0], display_name=SUPPORT[1])
    wid = f"slack-{TEAM}-{CHANNEL}-{root_ts}"
    assert harness.commands.calls == [("refund_takeover", (sam, wid, taken))]
    assert ephemeral["user"] == SUPPORT[0] and ephemeral["thread_ts"] == root_ts
    assert ephemeral["text"] == "refund_takeover done"


async def test_shortcut_where_the_bot_is_not_a_member_answers_by_response_url(
    harness: Harness,
) -> None:
    ts = harness.slack.add_message("C0NOBOT", "refund 1234")
    await harness.deliver(
        harness.sender.shortcut("C0NOBOT", ts, "refund_status", user=ADMIN[0], name=ADMIN[1])
    )

    async def answered() -> list:
        return harness.slack.responses

    (answer,) = await wait_for(answered, timeout=5, what="the response_url answer")
    assert answer["kind"] == "app" and answer["response_type"] == "ephemeral"
    assert answer["text"] == "refund_status done"


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------


def test_parse_mention() -> None:
    assert parse_mention("<@U0SAM|sam>") == Actor(
        platform="slack", user_id="U0SAM", display_name="sam"
    )
    assert parse_mention("<@W0ENT>") == Actor(platform="slack", user_id="W0ENT")
    assert parse_mention("U0SAM") == Actor(platform="slack", user_id="U0SAM")
    for bad in ("@sam", "<!channel>", "<#C0SUPPORT|support>", "sam", "<@U0SAM", ""):
        assert parse_mention(bad) is None
    assert parse_grant_args("<@U0SAM|sam> refund_approver 500") == (
        Actor(platform="slack", user_id="U0SAM", display_name="sam"),
        "refund_approver",
        "500",
    )
    assert parse_grant_args("<@U0SAM|sam>") is None


def test_parse_thread_link() -> None:
    root = ThreadRef(platform="slack", workspace=TEAM, channel=CHANNEL, thread="1732860000.000100")
    links = [
        f"https://acme.slack.com/archives/{CHANNEL}/p1732860000000100",
        f"<https://acme.slack.com/archives/{CHANNEL}/p1732860000000100>",
        f"<https://acme.slack.com/archives/{CHANNEL}/p1732860000000100|the thread>",
        f"https://acme.slack.com/archives/{CHANNEL}/p1732860099000200"
        f"?thread_ts=1732860000.000100&cid={CHANNEL}",
        f"https://acme.enterprise.slack.com/archives/{CHANNEL}/p1732860000000100",
    ]
    for link in links:
        assert parse_thread_link(link, TEAM) == root, link
    for bad in (
        f"http://acme.slack.com/archives/{CHANNEL}/p1732860000000100",
        f"https://slack.com.evil.example/archives/{CHANNEL}/p1732860000000100",
        f"https://acme.slack.com/archives/{CHANNEL}/1732860000000100",
        f"https://acme.slack.com/archives/{CHANNEL}/p17328600000001",
        f"https://acme.slack.com/archives/{CHANNEL}/p1732860000000100?thread_ts=x&cid={CHANNEL}",
        "https://acme.slack.com/archives/general/p1732860000000100",
        "4500",
        "",
    ):
        assert parse_thread_link(bad, TEAM) is None, bad
    assert parse_order_number("#4500") == "4500" and parse_order_number("4500") == "4500"
    assert parse_order_number("order 4500") is None and parse_order_number("") is None


def test_build_app_refuses_unsafe_configurations(slack: FakeSlackApi) -> None:
    router, commands = RecordingRouter(), RecordingCommands()
    with pytest.raises(ValueError, match="SLACK_SIGNING_SECRET"):
        build_app(settings_for(slack, signing_secret=None), router, commands)
    with pytest.raises(ValueError, match="SLACK_SUPPORT_CHANNEL"):
        build_app(settings_for(slack, support_channel=None), router, commands)
    with pytest.raises(ValueError, match="SLACK_BOT_TOKEN"):
        build_app(settings_for(slack, bot_token=None), router, commands)
    # Socket Mode needs no signing secret: Slack's WebSocket is authenticated by the app token.
    socket = settings_for(slack, signing_secret=None, app_token="xapp-1-A0-0-secret")
    assert build_app(socket, router, commands) is not None
    assert "xapp-1-A0-0-secret" not in repr(socket) and SECRET not in repr(settings_for(slack))


# ---------------------------------------------------------------------------------------------
# The user-group grant source
# ---------------------------------------------------------------------------------------------


@dataclass
class StoreStub:
    grants: dict[tuple[str, str], Grant] = field(default_factory=dict)
    asked: list[tuple[str, str]] = field(default_factory=list)

    async def live_grant(self, actor: Actor, role: str) -> Grant | None:
        self.asked.append((actor.user_id, role))
        return self.grants.get((actor.user_id, role))


async def test_user_group_membership_is_read_live(slack: FakeSlackApi) -> None:
    slack.add_usergroup("S0APPROVERS", ["U0SAM"])
    stored = Grant(
        grant_id=7,
        platform="slack",
        user_id="U0PAT",
        role="refund_approver",
        limit_cents=None,
        granted_at="2025-01-01T00:00:00+00:00",
        granted_by="seed",
    )
    store = StoreStub({("U0PAT", "refund_approver"): stored, ("U0SAM", "admin"): stored})
    source = SlackUserGroupGrants(
        settings_for(slack, approver_group="S0APPROVERS", approver_group_limit_cents=50000), store
    )
    sam = Actor(platform="slack", user_id="U0SAM", display_name="sam")

    grant = await source.live_grant(sam, "refund_approver")
    assert grant is not None and grant.limit_cents == 50000 and grant.user_id == "U0SAM"
    assert grant.granted_by == "slack-usergroup:S0APPROVERS"
    slack.add_usergroup("S0APPROVERS", [])  # removed in Slack: the very next check sees it
    assert await source.live_grant(sam, "refund_approver") is None
    calls = slack.calls_to("usergroups.users.list")
    assert len(calls) == 2 and calls[0].params["usergroup"] == "S0APPROVERS"

    # The group owns refund_approver for Slack users: a store grant does not add an approver.
    assert (
        await source.live_grant(Actor(platform="slack", user_id="U0PAT"), "refund_approver") is None
    )
    assert store.asked == []
    # Every other role, and every other platform, is the store's.
    assert await source.live_grant(sam, "admin") == stored
    local = Actor(platform="local", user_id="U0PAT")
    assert await source.live_grant(local, "refund_approver") == stored  # the stub keys by id
    assert store.asked == [("U0SAM", "admin"), ("U0PAT", "refund_approver")]
    assert len(slack.calls_to("usergroups.users.list")) == 3
    # Every read before a refund comes over one kept-alive connection, closed with the source.
    assert len({call.connection for call in slack.calls}) == 1
    await source.close()

    async def closed() -> bool:
        return slack.open_connections() == 0

    await wait_for(closed, timeout=5, what="the group reader's connection to close")

    # Without a group the store decides everything and Slack is never asked.
    plain = SlackUserGroupGrants(settings_for(slack, bot_token=None), store)
    assert plain.group is None
    assert await plain.live_grant(Actor(platform="slack", user_id="U0PAT"), "refund_approver")
    assert len(slack.calls_to("usergroups.users.list")) == 3


async def test_user_group_errors(slack: FakeSlackApi) -> None:
    sam = Actor(platform="slack", user_id="U0SAM")
    source = SlackUserGroupGrants(settings_for(slack, approver_group="S0GONE"), StoreStub())
    # A group that does not exist (or a missing scope) fails closed.
    assert await source.live_grant(sam, "refund_approver") is None
    # A rate limit is transient: the Activity fails and Temporal retries it.
    slack.add_usergroup("S0GONE", ["U0SAM"])
    slack.rate_limit("usergroups.users.list", retry_after=30)
    with pytest.raises(SlackApiError):
        await source.live_grant(sam, "refund_approver")
    assert await source.live_grant(sam, "refund_approver") is not None
    await source.close()
    with pytest.raises(ValueError, match="SLACK_BOT_TOKEN"):
        SlackUserGroupGrants(settings_for(slack, approver_group="S0X", bot_token=None), StoreStub())


# ---------------------------------------------------------------------------------------------
# The manifests register exactly what the app handles
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["slack-app.yaml", "slack-app-http.yaml"])
def test_manifest_matches_the_app(name: str) -> None:
    text = (Path(__file__).parent.parent / "manifests" / name).read_text()
    commands = set(re.findall(r"^\s*- command: (/\S+)$", text, re.M))
    assert commands == slack_commands.COMMANDS
    shortcuts = set(re.findall(r"^\s*callback_id: (\S+)$", text, re.M))
    assert shortcuts == slack_commands.SHORTCUTS
    assert re.search(r"^\s*- message\.channels$", text, re.M)
    assert re.search(r"^\s*- message\.groups$", text, re.M)
    http = "socket_mode_enabled: false" in text
    assert http == (name == "slack-app-http.yaml")
    urls = re.findall(r"(?:url|request_url): (\S+)$", text, re.M)
    if http:  # every command, the events and interactivity: one endpoint
        assert urls == [f"https://YOUR-HOST{EVENTS_PATH}"] * (len(commands) + 2)
    else:
        assert urls == []


async def test_keyed_locks_forget_free_keys() -> None:
    locks = KeyedLocks()
    order: list[str] = []

    async def use(key: str, name: str, hold: float) -> None:
        async with locks.hold(key):
            order.append(f"{name}+")
            await asyncio.sleep(hold)
            order.append(f"{name}-")

    await asyncio.gather(use("t1", "a", 0.02), use("t1", "b", 0), use("t2", "c", 0))
    assert order.index("a-") < order.index("b+")  # same key: one after the other
    assert order.index("c+") < order.index("a-")  # another key: not held up
    assert len(locks) == 0

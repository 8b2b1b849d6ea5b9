"""Hostile input, fuzzed at every inbound surface: never a 5xx, never a traceback, nothing lost.

    hypothesis (derandomized, bounded) -> valid payloads mutated, JSON of any shape, headers of
    any bytes, signed and not, HTTP that is not HTTP -> the real app on a loopback port (Slack's
    endpoint, /healthz and /metrics, the codec server), or a handler's real entry point (Socket
    Mode's websocket, Discord's gateway parsers, the terminal's typed lines)

Each example checks what the surface promises: an answer of 401, 400, 413 or an acknowledgement
(404 and 405 for a path or method that is not served), one log line at most for what it refused
and never a traceback or an ERROR, and every customer message or click it acknowledged handed to
the router or kept as a dead letter (the router is the recording one: what it does with them is
tests/test_router.py's). The examples are the same on every run; a failure prints the one that
failed, shrunk.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import gzip
import io
import json
import time
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from aiohttp import web
from google.protobuf import json_format
from hypothesis import event, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError
from temporalio.api.common.v1 import Payloads
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime

from agent import http_edge
from agent.codec import AesGcmCodec
from agent.models import Actor, CustomerMessage, MessageKey, OutboundMessage, ThreadRef
from agent.settings import AgentSettings
from agent.stores.grants import GrantStore
from agent.stores.sqlite import SqliteDatabase
from bot.commands import Commands
from bot.discord.edge import check
from bot.discord.outbound import DiscordThreadPoster
from bot.discord.settings import DiscordSettings
from bot.hold import HoldSwitch
from bot.ids import workflow_id_for
from bot.inbox import Inbox
from bot.local.terminal import LocalChannel
from bot.local.thread_store import LocalThreadStore
from bot.slack.actions import DECISION_ACTIONS, click_location, inbound_click
from bot.slack.app import EVENTS_PATH, SlackApp, build_app, http_web_app, serve
from bot.slack.commands import COMMANDS, STATUS_SHORTCUT
from bot.slack.events import inbound_message
from bot.slack.identity import BotIdentity
from bot.slack.render import APPROVE_ACTION_ID, DENY_ACTION_ID
from bot.slack.requests import (
    BlockActions,
    MalformedRequest,
    MessageEventCallback,
    SlashCommand,
    parse_body,
    read_request,
)
from harness import free_port
from harness.codec import TEST_KEYS
from harness.conditions import wait_for
from harness.fakes.discord_api import FakeDiscordAPI
from harness.fakes.loopback import serve_on_loopback
from harness.fakes.slack_api import FakeSlackApi, JsonDict, SlackSender
from harness.raw_http import exchange, raw_request
from harness.recording_router import RecordingRouter
from refund_bot.ops import Ops, serving_ops
from tests.support.discord_client import (
    Bot,
    FakeRestart,
    StagingDemos,
    StubTemporal,
    connected,
    custom_ids,
)
from tests.support.discord_guild import (
    AGENT,
    APPROVER_ROLE,
    CUSTOMER,
    GUILD,
    OTHER,
    PRESENTER,
    seed_guild,
)
from tests.support.discord_guild import SUPPORT as DISCORD_SUPPORT
from tests.support.hostile import (
    CONTENT_ENCODINGS,
    FUZZ,
    GARBAGE,
    HEADER_BYTES,
    JSON,
    TIMESTAMPS,
    loud,
    mutated,
    paths,
)
from tests.support.slack_app import (
    ADMIN,
    CHANNEL,
    SECRET,
    SUPPORT,
    TEAM,
    RecordingCommands,
    settings_for,
    signed,
)
from tests.support.slack_app import posted_escalation as escalation_in
from worker.codec_server import codec_app

FORM = "application/x-www-form-urlencoded"
# Answers a server may give to input; 404 and 405 only to a path or method it does not serve.
REFUSALS = {400, 401, 404, 405, 413}

# Who the bot is in the fake workspace (FakeSlackApi's defaults, as its auth.test answers).
FAKE_BOT = BotIdentity("U0REFUNDBOT", "B0REFUNDBOT")


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)


async def serving(web_app: web.Application) -> tuple[web.AppRunner, int]:
    """`web_app` on a loopback port, run as refund-bot runs its servers (http_edge.runner)."""
    runner = http_edge.runner(web_app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


# ---------------------------------------------------------------------------------------------
# Slack's HTTP endpoint
# ---------------------------------------------------------------------------------------------


@dataclass
class SlackEndpoint:
    slack: FakeSlackApi
    app: SlackApp
    router: RecordingRouter
    commands: RecordingCommands
    port: int
    templates: dict[str, JsonDict] = field(default_factory=dict)


@pytest.fixture
async def slack_endpoint() -> AsyncIterator[SlackEndpoint]:
    async with FakeSlackApi(team_id=TEAM) as slack:
        router, commands = RecordingRouter(), RecordingCommands()
        app = build_app(settings_for(slack), router, commands)
        runner, port = await serving(http_web_app(app, SECRET))
        endpoint = SlackEndpoint(slack, app, router, commands, port)
        endpoint.templates = await slack_templates(slack)
        try:
            yield endpoint
        finally:
            await runner.cleanup()
            await app.client.close()  # type: ignore[attr-defined]


async def slack_templates(slack: FakeSlackApi) -> dict[str, JsonDict]:
    """One of each request Slack sends refund-bot, as Slack sends it: what the fuzz mutates."""
    sender = SlackSender(slack)
    root = sender.post(CHANNEL, "please refund order 1234")
    _, escalation_ts, _ = await escalation_in(slack)
    admin = {"user": ADMIN[0], "name": ADMIN[1]}
    return {
        "message": root.payload,
        "reply": sender.post(CHANNEL, "Yes", thread_ts=root.payload["event"]["ts"]).payload,
        "elsewhere": sender.post("C0ELSEWHERE", "hello").payload,
        "approve": sender.click(CHANNEL, escalation_ts, APPROVE_ACTION_ID, **_support()).payload,
        "deny": sender.click(CHANNEL, escalation_ts, DENY_ACTION_ID, **_support()).payload,
        "shortcut": sender.shortcut(CHANNEL, escalation_ts, STATUS_SHORTCUT, **admin).payload,
        "command": sender.command("/refund-status", "4500", **admin).payload,
        "hold": sender.command("/refund-hold", "on", **admin).payload,
        "url_verification": {"token": "x", "challenge": "c-1", "type": "url_verification"},
        # What Slack may send an app that refund-bot has no listener for.
        "app_mention": {"type": "event_callback", "event": {"type": "app_mention", "text": "hi"}},
        "app_rate_limited": {"type": "app_rate_limited", "team_id": TEAM},
        "interactive_message": {
            "type": "interactive_message",
            "callback_id": "legacy",
            "actions": [{"name": "x", "type": "button", "value": "1"}],
            "user": {"id": SUPPORT[0]},
            "channel": {"id": CHANNEL},
        },
        "workflow_step_edit": {
            "type": "workflow_step_edit",
            "callback_id": "step",
            "workflow_step": {"workflow_step_edit_id": "1"},
            "user": {"id": ADMIN[0]},
        },
        "view_submission": {"type": "view_submission", "user": {"id": ADMIN[0]}, "view": {}},
        "global_shortcut": {"type": "shortcut", "callback_id": "x", "user": {"id": ADMIN[0]}},
    }


# What a person types after a slash command: links (well-formed, malformed, to elsewhere), order
# numbers, mentions, Workflow IDs past Temporal's limit, and anything else.
COMMAND_TEXT = st.sampled_from(
    [
        "https://[::1/archives/C0SUPPORT/p1732860000000100",
        "<https://[::1/x|a link>",
        "https://fake-workspace.slack.com:99999/archives/C0SUPPORT/p1732860000000100",
        "https://fake-workspace.slack.com/archives/C0SUPPORT/p1732860000000200?thread_ts=x&cid=[",
        "https://evil.example/archives/C1/p1",
        "4500",
        "#" + "9" * 5000,
        "<@U0SAM|sam> admin 500",
        "<@U0SAM> refund_approver $1e999",
        f"slack-{TEAM}-" + "x" * 2000,
        "on",
        "auto 1e999",
        "next &amp;lt;",
    ]
) | st.text(max_size=60)
HANDLED_KINDS = ("message", "reply", "approve", "deny", "shortcut", "command", "hold")
# The fields of Slack's payloads that bolt or refund-bot's listeners read: half the fuzz's changes
# go to these (tests.support.hostile.mutated).
SLACK_READ = frozenset(
    {
        "type",
        "subtype",
        "event",
        "event_id",
        "team_id",
        "team",
        "user",
        "user_profile",
        "display_name",
        "real_name",
        "channel",
        "channel_id",
        "channel_type",
        "ts",
        "thread_ts",
        "text",
        "bot_id",
        "bot_profile",
        "message",
        "previous_message",
        "authorizations",
        "enterprise_id",
        "actions",
        "action_id",
        "value",
        "action_ts",
        "container",
        "message_ts",
        "blocks",
        "trigger_id",
        "response_url",
        "callback_id",
        "command",
        "user_id",
        "user_name",
        "id",
        "name",
        "username",
        "challenge",
        "workflow_step",
        "view",
    }
)


def _support() -> dict[str, str]:
    return {"user": SUPPORT[0], "name": SUPPORT[1]}


def _form(fields: JsonDict) -> bytes:
    # A form carries strings only: anything else goes as its JSON.
    def text(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value)

    return "&".join(
        f"{quote_plus(str(k))}={quote_plus(text(v))}" for k, v in fields.items()
    ).encode()


@dataclass(frozen=True)
class SlackCase:
    body: bytes
    content_type: str | None
    headers: tuple[tuple[bytes, bytes], ...]
    signed: bool  # with the right secret and a current timestamp
    encoded: bool  # Content-Encoding names a coding the body really is in (or none)
    method: bytes = b"POST"
    path: bytes = EVENTS_PATH.encode()


@st.composite
def slack_cases(draw: st.DrawFn, slack: FakeSlackApi, templates: dict[str, JsonDict]) -> SlackCase:
    # What refund-bot handles three times as often as what it does not, or bytes.
    kind = draw(st.sampled_from([*templates, *HANDLED_KINDS, *HANDLED_KINDS, "raw"]))
    if kind == "raw":
        body = draw(st.binary(max_size=300) | JSON.map(lambda v: json.dumps(v).encode()))
        content_type = draw(st.sampled_from(["application/json", FORM, None]))
    else:
        template = templates[kind]
        if "response_url" in template:
            # One of its own (Slack's hooks take five answers each), of its kind: a command's
            # answers are counted, a shortcut's or a click's are not.
            hook = "commands" if "command" in template else "app"
            template = {**template, "response_url": slack.response_url(hook)}
        payload = draw(mutated(template, SLACK_READ))
        if "command" in template and draw(st.booleans()):
            payload["text"] = draw(COMMAND_TEXT)
        if kind in ("command", "hold") and draw(st.booleans()):
            body, content_type = _form(payload), FORM
        elif kind in ("approve", "deny", "shortcut", "interactive_message", "workflow_step_edit"):
            body, content_type = b"payload=" + quote(json.dumps(payload)).encode(), FORM
        else:
            body, content_type = json.dumps(payload).encode(), "application/json"
    content_type = draw(
        st.sampled_from([content_type] * 4 + ["text/plain", "application/json; charset=nope"])
    )
    headers: list[tuple[bytes, bytes]] = []
    sent, encoded = body, True
    coding = draw(CONTENT_ENCODINGS)
    if coding is not None:
        headers.append((b"Content-Encoding", coding))
        if coding in (b"gzip", b"deflate") and draw(st.booleans()):
            sent = gzip.compress(body) if coding == b"gzip" else zlib.compress(body)
        else:
            # Bytes that are not in the coding aiohttp would undo (a coding it has no decoder for,
            # it leaves alone: the bytes signed are the bytes sent).
            encoded = coding not in (b"gzip", b"deflate") and not _decodes_brotli(coding)
    signing = draw(st.sampled_from(["slack"] * 5 + ["forged", "unsigned", "stale", "any"]))
    if signing != "unsigned":
        good = signed(body, content_type or "", secret=SECRET if signing == "slack" else "forged")
        timestamp = good["X-Slack-Request-Timestamp"].encode()
        if signing == "stale":
            timestamp = str(int(time.time()) - 3600).encode()
        elif signing == "any":
            timestamp = draw(TIMESTAMPS)
        headers += [
            (b"X-Slack-Request-Timestamp", timestamp),
            (b"X-Slack-Signature", good["X-Slack-Signature"].encode()),
        ]
    if content_type is not None:
        headers.append((b"Content-Type", content_type.encode()))
    headers += draw(
        st.lists(st.tuples(st.sampled_from([b"X-Junk", b"Accept"]), HEADER_BYTES), max_size=2)
    )
    method, path = draw(
        st.sampled_from(
            [(b"POST", EVENTS_PATH.encode())] * 8
            + [(b"GET", EVENTS_PATH.encode()), (b"POST", b"/other")]
        )
    )
    return SlackCase(sent, content_type, tuple(headers), signing == "slack", encoded, method, path)


def _decodes_brotli(coding: bytes) -> bool:
    try:
        import brotli  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return coding == b"br"


def _mimetype(content_type: str | None) -> str:
    # As aiohttp reads the header: its type without parameters, octet-stream when absent.
    return (content_type or "application/octet-stream").split(";")[0].strip().lower()


@dataclass(frozen=True)
class Handled:
    """What an acknowledged request must lead to: messages and clicks handed to the router,
    commands answered at their response_url."""

    messages: int = 0
    clicks: int = 0
    answers: int = 0


def handled_by_the_app(case: SlackCase, body: bytes) -> Handled:
    try:
        request = read_request(parse_body(body, _mimetype(case.content_type)))
    except MalformedRequest:
        return Handled()
    if isinstance(request, MessageEventCallback):
        return Handled(messages=int(inbound_message(request, CHANNEL, FAKE_BOT) is not None))
    if isinstance(request, BlockActions) and request.actions[0].action_id in DECISION_ACTIONS:
        # A click on no message of a channel (a modal's button, say) is not one of ours.
        located = click_location(request) is not None
        return Handled(clicks=int(inbound_click(request) is not None and located))
    if isinstance(request, SlashCommand) and request.command in COMMANDS:
        return Handled(answers=1)
    return Handled()


def _seen(endpoint: SlackEndpoint) -> Handled:
    router = endpoint.router
    answers = [r for r in endpoint.slack.responses if r["kind"] == "commands"]
    return Handled(len(router.arrived), len(router.clicks), len(answers))


@pytest.mark.timeout(180)
@settings(FUZZ, max_examples=2000)
@given(data=st.data())
async def test_slack_http_fuzz(
    slack_endpoint: SlackEndpoint, caplog: pytest.LogCaptureFixture, data: st.DataObject
) -> None:
    """About 2,000 requests to Slack's endpoint: mutated Slack payloads, raw bytes, signed, forged,
    stale, unsigned, any Content-Type and Content-Encoding, header bytes of any kind, and bytes
    that are not HTTP."""
    endpoint = slack_endpoint
    caplog.clear()
    garbage = data.draw(st.integers(min_value=0, max_value=9)) == 0  # one in ten: not HTTP
    case = data.draw(GARBAGE if garbage else slack_cases(endpoint.slack, endpoint.templates))
    if isinstance(case, bytes):
        status = await exchange(endpoint.port, case, then_eof=True)
        event(f"not HTTP: {status}")
        assert status is None or status in REFUSALS, status
    else:
        await check_slack_case(endpoint, case)
    # Over HTTP what does not fit is refused before the ack: nothing is left to keep.
    assert endpoint.router.unreadable == []
    assert loud(caplog) == []


# Values of every JSON type, for a field of any one of them.
WRONG_TYPES: tuple[Any, ...] = (None, 7, True, ["x"], {"id": "x"}, "9" * 5000)


@pytest.mark.timeout(180)
async def test_slack_every_field_read_of_every_type(
    slack_endpoint: SlackEndpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """Each field bolt or a listener reads, in each request refund-bot handles, given a value of
    each JSON type in turn, signed: what random changes reach only now and then, all of it."""
    endpoint = slack_endpoint
    sent = 0
    for kind in HANDLED_KINDS:
        template = endpoint.templates[kind]
        read = [p for p in paths(template) if isinstance(p[-1], str) and p[-1] in SLACK_READ]
        # A message's blocks are passed on whole; what is inside them is Slack's.
        for path in [p for p in read if "blocks" not in p[:-1]]:
            for value in WRONG_TYPES:
                payload = copy.deepcopy(template)
                if "response_url" in payload:
                    hook = "commands" if "command" in payload else "app"
                    payload["response_url"] = endpoint.slack.response_url(hook)
                node: Any = payload
                for part in path[:-1]:
                    node = node[part]
                node[path[-1]] = value
                await check_slack_case(endpoint, slack_case(kind, payload), note=_ignore)
                sent += 1
    assert sent > 300  # every handled kind, every field read
    assert endpoint.router.unreadable == [] and loud(caplog) == []


def slack_case(kind: str, payload: JsonDict) -> SlackCase:
    """`payload` sent as Slack sends a request of its kind, signed."""
    if kind in ("command", "hold"):
        body, content_type = _form(payload), FORM
    elif kind in ("approve", "deny", "shortcut"):
        body, content_type = b"payload=" + quote(json.dumps(payload)).encode(), FORM
    else:
        body, content_type = json.dumps(payload).encode(), "application/json"
    good = signed(body, content_type)
    headers = tuple((name.encode(), value.encode()) for name, value in good.items())
    return SlackCase(body, content_type, headers, signed=True, encoded=True)


async def check_slack_case(
    endpoint: SlackEndpoint, case: SlackCase, note: Callable[[str], None] = event
) -> None:
    """Send `case`; its answer is an acknowledgement or a refusal, and what was acknowledged
    reaches the router (a message, a click) or is answered (a command). `note`: hypothesis's
    statistics, inside a hypothesis test."""
    before = _seen(endpoint)
    request = raw_request(case.method, case.path, case.headers, case.body)
    status = await exchange(endpoint.port, request)
    note(f"{'signed' if case.signed else 'not signed'}: {status}")
    assert status in {200} | REFUSALS, (status, case)
    served = (case.method, case.path) == (b"POST", EVENTS_PATH.encode())
    if served and case.signed and case.encoded:
        assert status in (200, 400), status  # acknowledged, or refused as malformed
    if status == 200:
        assert served and case.signed and case.encoded, case
        handled = handled_by_the_app(case, _decoded(case))
        note(f"acknowledged: {handled}")
        after = Handled(
            before.messages + handled.messages,
            before.clicks + handled.clicks,
            before.answers + handled.answers,
        )
        await wait_for(lambda: _async(_seen(endpoint) == after), timeout=5, what=f"{handled} done")


def _ignore(_: str) -> None:
    pass


async def _async(value: Any) -> Any:
    return value


def _decoded(case: SlackCase) -> bytes:
    for name, value in case.headers:
        if name == b"Content-Encoding" and value == b"gzip":
            return gzip.decompress(case.body)
        if name == b"Content-Encoding" and value == b"deflate":
            return zlib.decompress(case.body)
    return case.body


# ---------------------------------------------------------------------------------------------
# Slack's Socket Mode
# ---------------------------------------------------------------------------------------------


@dataclass
class SocketMode:
    slack: FakeSlackApi
    router: RecordingRouter
    templates: dict[str, JsonDict]


@pytest.fixture
async def socket_mode() -> AsyncIterator[SocketMode]:
    async with FakeSlackApi(team_id=TEAM) as slack:
        settings = settings_for(slack, app_token=slack.app_token, signing_secret=None)
        router = RecordingRouter()
        app = build_app(settings, router, RecordingCommands())
        templates = await slack_templates(slack)
        task = asyncio.create_task(serve(app, settings))
        try:
            await wait_for(lambda: _async(slack.socket_connections == 1), what="Socket Mode")
            yield SocketMode(slack, router, templates)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


ENVELOPE_TYPES = {
    "events_api": ("message", "reply", "elsewhere", "app_mention", "app_rate_limited"),
    "interactive": ("approve", "deny", "shortcut", "interactive_message", "workflow_step_edit"),
    "slash_commands": ("command", "hold"),
}


@pytest.mark.timeout(120)
@settings(FUZZ, max_examples=400)
@given(data=st.data())
async def test_socket_mode_fuzz(
    socket_mode: SocketMode, caplog: pytest.LogCaptureFixture, data: st.DataObject
) -> None:
    """About 400 envelopes over Socket Mode's websocket: mutated payloads of each envelope type,
    payloads that are not objects, envelope types Slack has not sent. Every one is acknowledged
    (or Slack sends it again for ever); what does not fit is kept if it was an event or a click."""
    caplog.clear()
    slack, router = socket_mode.slack, socket_mode.router
    envelope_type = data.draw(st.sampled_from([*ENVELOPE_TYPES, "hello_there"]))
    kinds = ENVELOPE_TYPES.get(envelope_type, ("message",))
    template = socket_mode.templates[data.draw(st.sampled_from(kinds))]
    if "response_url" in template:
        hook = "commands" if "command" in template else "app"
        template = {**template, "response_url": slack.response_url(hook)}
    payload = data.draw(mutated(template, SLACK_READ) | JSON)
    before = (len(router.arrived), len(router.clicks), len(router.unreadable))
    envelope = await slack.socket_send(envelope_type, payload)  # type: ignore[arg-type]

    async def acked() -> bool:
        return any(a["envelope_id"] == envelope for a in slack.socket_acks)

    await wait_for(acked, timeout=5, what="the envelope acknowledged")
    expected = _socket_expected(envelope_type, payload)
    event(f"{envelope_type}: {expected}")

    async def handed_over() -> bool:
        now = (len(router.arrived), len(router.clicks), len(router.unreadable))
        return now == tuple(b + e for b, e in zip(before, expected, strict=True))

    await wait_for(handed_over, timeout=5, what=f"{expected} (messages, clicks, kept)")
    assert loud(caplog) == []


def _socket_expected(envelope_type: str, payload: Any) -> tuple[int, int, int]:
    """(messages routed, clicks routed, dead letters) for one envelope."""
    if isinstance(payload, str):
        payload = {"text": payload}  # as the SDK reads a payload that is a string
    if not isinstance(payload, dict):
        return 0, 0, int(envelope_type in ("events_api", "interactive"))
    try:
        request = read_request(payload)
    except MalformedRequest:
        return 0, 0, int(envelope_type in ("events_api", "interactive"))
    if isinstance(request, MessageEventCallback):
        return int(inbound_message(request, CHANNEL, FAKE_BOT) is not None), 0, 0
    if isinstance(request, BlockActions) and request.actions[0].action_id in DECISION_ACTIONS:
        routed = inbound_click(request) is not None and click_location(request) is not None
        return 0, int(routed), 0
    return 0, 0, 0


# ---------------------------------------------------------------------------------------------
# The bot's /healthz and /metrics
# ---------------------------------------------------------------------------------------------


@pytest.fixture
async def ops_port(tmp_path: Path) -> AsyncIterator[int]:
    """refund_bot.ops served as refund-bot serves it, every part well, its exporter a stub."""

    async def exporter(_: web.Request) -> web.Response:
        return web.Response(text="# TYPE up gauge\nup 1\n")

    stub = web.Application()
    stub.router.add_get("/metrics", exporter)
    stub_runner, stub_url = await serve_on_loopback(stub)
    temporal = SimpleNamespace(
        service_client=SimpleNamespace(
            config=SimpleNamespace(target_host="stub:7233"),
            check_health=lambda timeout=None: asyncio.sleep(0, True),
        )
    )
    ops = Ops(
        temporal,  # type: ignore[arg-type]
        Inbox(SqliteDatabase(tmp_path)),
        [],
        f"{stub_url}/metrics",
        Runtime.default().metric_meter,
    )
    port = free_port()
    try:
        async with serving_ops(f"127.0.0.1:{port}", ops):
            yield port
    finally:
        await stub_runner.cleanup()


METHODS = st.sampled_from([b"GET", b"GET", b"HEAD", b"POST", b"DELETE", b"OPTIONS", b"G\x00T"])
HEADERS = st.lists(
    st.tuples(
        st.sampled_from(
            [b"Accept", b"Content-Type", b"Content-Encoding", b"X-Forwarded-For", b"Range"]
        ),
        HEADER_BYTES,
    ),
    max_size=3,
)


@pytest.mark.timeout(120)
@settings(FUZZ, max_examples=500)
@given(data=st.data())
async def test_ops_fuzz(
    ops_port: int, caplog: pytest.LogCaptureFixture, data: st.DataObject
) -> None:
    """About 500 requests to /healthz and /metrics: any method, paths near and far, header bytes
    of any kind, bodies of any encoding, and bytes that are not HTTP."""
    caplog.clear()
    if data.draw(st.integers(min_value=0, max_value=9)) == 0:
        status = await exchange(ops_port, data.draw(GARBAGE), then_eof=True)
        assert status is None or status in REFUSALS, status
    else:
        method = data.draw(METHODS)
        path = data.draw(
            st.sampled_from([b"/healthz", b"/metrics"] * 4 + [b"/healthz?x=%ff", b"/metrics/../x"])
            | st.binary(max_size=30).map(lambda b: b"/" + quote(b).encode())
        )
        body = data.draw(st.binary(max_size=100))
        status = await exchange(ops_port, raw_request(method, path, data.draw(HEADERS), body))
        event(
            f"{method!r} {path if path in (b'/healthz', b'/metrics') else b'elsewhere'!r}: {status}"
        )
        assert status in {200} | REFUSALS, status
    assert loud(caplog) == []


# ---------------------------------------------------------------------------------------------
# The codec server
# ---------------------------------------------------------------------------------------------

TOKEN = "codec-fuzz-token"
UI = "http://localhost:8233"


@dataclass
class CodecServer:
    port: int
    sealed: JsonDict  # {"payloads": [...]}: what the Worker writes
    plain: JsonDict  # the same, decoded


@pytest.fixture
async def codec_server() -> AsyncIterator[CodecServer]:
    codec = AesGcmCodec(TEST_KEYS)
    plain = pydantic_data_converter.payload_converter.to_payloads(
        [CustomerMessage(message_id="m1", author=Actor(platform="local", user_id="u"), text="hi")]
    )
    sealed = await codec.encode(plain)
    app = codec_app(codec, "default", {UI}, SecretStr(TOKEN))
    runner, port = await serving(app)
    try:
        yield CodecServer(
            port,
            json_format.MessageToDict(Payloads(payloads=sealed)),
            json_format.MessageToDict(Payloads(payloads=plain)),
        )
    finally:
        await runner.cleanup()


CODEC_READ = frozenset(
    {"payloads", "metadata", "data", "encoding", "encryption-key-id", "compression"}
)


@st.composite
def codec_requests(draw: st.DrawFn, server: CodecServer) -> tuple[bytes, bool]:
    """A request to the codec server, and whether it carries the token."""
    kind = draw(st.sampled_from(["sealed", "sealed", "plain", "json", "bytes"]))
    if kind in ("sealed", "plain"):
        template = server.sealed if kind == "sealed" else server.plain
        payloads = draw(mutated(template, CODEC_READ))
        if kind == "sealed" and draw(st.booleans()):
            # Data of any length under a key id this server holds: shorter than a nonce, say.
            data = draw(st.binary(max_size=40))
            with contextlib.suppress(LookupError, TypeError, AttributeError):
                payloads["payloads"][0]["data"] = base64.b64encode(data).decode()
        body = json.dumps(payloads).encode()
    elif kind == "json":
        body = json.dumps(draw(JSON)).encode()
    else:
        body = draw(st.binary(max_size=200))
    token = f"Bearer {TOKEN}".encode()
    auth = draw(
        st.sampled_from([token] * 4 + [b"", b"Bearer nope", TOKEN.encode()])
        | st.sampled_from([b"Bearer \xff\xfe", "Bearer tökén".encode(), b"\xc3\x28", b"\x80"])
        | HEADER_BYTES
    )
    headers = [(b"Authorization", auth)] if auth else []
    coding = draw(CONTENT_ENCODINGS)
    if coding is not None:
        headers.append((b"Content-Encoding", coding))
        if coding == b"gzip" and draw(st.booleans()):
            body = gzip.compress(body)
    headers += draw(
        st.lists(
            st.tuples(
                st.sampled_from([b"X-Namespace", b"Origin", b"Content-Type"]),
                st.sampled_from([b"default", UI.encode(), b"application/json; charset=nope"])
                | HEADER_BYTES,
            ),
            max_size=3,
        )
    )
    method = draw(st.sampled_from([b"POST"] * 6 + [b"OPTIONS", b"GET"]))
    path = draw(st.sampled_from([b"/decode", b"/encode", b"/decode", b"/", b"/decode/x"]))
    return raw_request(method, path, headers, body), auth == token


@pytest.mark.timeout(120)
@settings(FUZZ, max_examples=1000)
@given(data=st.data())
async def test_codec_server_fuzz(
    codec_server: CodecServer, caplog: pytest.LogCaptureFixture, data: st.DataObject
) -> None:
    """About 1,000 requests to the codec server: what the Worker wrote, mutated (metadata, key ids,
    data of any length), JSON of any shape and raw bytes, with the token and without, header
    bytes of any kind, bodies in encodings they are not in, and bytes that are not HTTP."""
    caplog.clear()
    if data.draw(st.integers(min_value=0, max_value=9)) == 0:
        status = await exchange(codec_server.port, data.draw(GARBAGE), then_eof=True)
        assert status is None or status in REFUSALS, status
    else:
        request, authorized = data.draw(codec_requests(codec_server))
        status = await exchange(codec_server.port, request)
        event(f"{'with' if authorized else 'without'} the token: {status}")
        assert status in {200, 204, 403} | REFUSALS, status
        if status == 200:
            assert authorized
    assert loud(caplog) == []


# ---------------------------------------------------------------------------------------------
# Discord's gateway: messages and interactions
# ---------------------------------------------------------------------------------------------


@dataclass
class DiscordBot:
    bot: Bot
    thread_id: int  # a conversation's
    posted: int = 0

    async def escalation(self) -> JsonDict:
        """A new escalation in the thread, its buttons on it, as the Worker posts one."""
        self.posted += 1
        thread = ThreadRef(
            platform="discord",
            workspace=str(GUILD),
            channel=str(DISCORD_SUPPORT),
            thread=str(self.thread_id),
        )
        message = OutboundMessage(
            thread=thread,
            # A key of its own: the poster finds the message a key already posted.
            key=MessageKey(workflow_id=workflow_id_for(thread), run_id="run-1", seq=self.posted),
            kind="escalation",
            text="Refund $250.00?",
            actions=["approve", "deny"],
            round=self.posted,
        )
        api = self.bot.api
        async with DiscordThreadPoster(SecretStr(api.token), api_url=api.api_url) as poster:
            posted = await poster.post(message)
        stored = api.message(self.thread_id, posted.platform_message_id)
        assert stored is not None
        return stored


@pytest.fixture
async def discord_bot(tmp_path: Path) -> AsyncIterator[DiscordBot]:
    """The Discord client as test_discord_client.py connects it (discord.py's own parsers, the
    fake Discord's REST), with real commands on real stores, and one conversation."""
    async with FakeDiscordAPI() as api:
        seed_guild(api)
        settings = DiscordSettings(
            _env_file=None,
            token=SecretStr(api.token),
            support_channel_id=DISCORD_SUPPORT,
            guild_id=GUILD,
            approver_role=str(APPROVER_ROLE),
            api_url=api.api_url,
        )
        store = GrantStore(SqliteDatabase(tmp_path))
        seed = Actor(platform="local", user_id="seed")
        await store.grant(
            Actor(platform="discord", user_id=str(PRESENTER)), "presenter", None, by=seed
        )
        agent = AgentSettings(_env_file=None, data_dir=tmp_path)
        hold = HoldSwitch(SqliteDatabase(tmp_path), default=False)
        commands = Commands(StubTemporal(), FakeRestart(), agent, store, hold, StagingDemos())  # type: ignore[arg-type]
        async with connected(api, settings, RecordingRouter(), commands, store) as bot:
            yield DiscordBot(bot, await bot.open_conversation())


# The fields of Discord's payloads that discord.py or refund-bot's handlers read.
DISCORD_READ = frozenset(
    {
        "id",
        "type",
        "content",
        "channel_id",
        "guild_id",
        "webhook_id",
        "author",
        "member",
        "user",
        "username",
        "global_name",
        "bot",
        "nick",
        "roles",
        "mentions",
        "mention_roles",
        "embeds",
        "attachments",
        "components",
        "timestamp",
        "edited_timestamp",
        "data",
        "custom_id",
        "component_type",
        "name",
        "options",
        "value",
        "message",
        "application_id",
        "token",
        "channel",
        "permissions",
    }
)


async def _discord_settled() -> None:
    """Until discord.py's event tasks (on_message, a button's callback, a command) are done."""

    def running() -> list[asyncio.Task[Any]]:
        return [
            t
            for t in asyncio.all_tasks()
            if t is not asyncio.current_task()
            and t.get_name().startswith(("discord", "CommandTree"))
            and not t.done()
        ]

    await wait_for(lambda: _async(not running()), timeout=10, what="discord.py's event tasks")


@pytest.mark.timeout(180)
@settings(FUZZ, max_examples=400)
@given(data=st.data())
async def test_discord_gateway_fuzz(
    discord_bot: DiscordBot, caplog: pytest.LogCaptureFixture, data: st.DataObject
) -> None:
    """About 400 gateway events through discord.py's own parsers, as its gateway reader hands
    them over: customers' messages in the support channel, in a conversation's thread and
    elsewhere, clicks on the escalation's buttons, and slash commands, each mutated (a field of
    another type, removed, added). None raises into the gateway's reader; one that does not fit
    is kept as a dead letter (a message or a click); an unchanged one does what it always did."""
    caplog.clear()
    bot, api, router = discord_bot.bot, discord_bot.bot.api, discord_bot.bot.router
    kind = data.draw(st.sampled_from(["support", "thread", "elsewhere", "click", "command"]))
    if kind == "click":
        # Buttons of their own: a click takes them off the message it was on.
        escalation = await discord_bot.escalation()
        custom_id = data.draw(st.sampled_from(custom_ids(escalation)))
        base = api.component_interaction(discord_bot.thread_id, escalation["id"], AGENT, custom_id)
        gateway_event = "INTERACTION_CREATE"
    elif kind == "command":
        given = data.draw(
            st.sampled_from(["", f"https://discord.com/channels/{GUILD}/1"]) | COMMAND_TEXT
        )
        options: dict[str, str | int | bool] | None = {"conversation": given} if given else None
        base = api.command_interaction("refund-status", DISCORD_SUPPORT, PRESENTER, options)
        gateway_event = "INTERACTION_CREATE"
    else:
        channel = {"support": DISCORD_SUPPORT, "thread": discord_bot.thread_id}.get(kind, OTHER)
        base = api.user_message(channel, CUSTOMER, data.draw(st.text(max_size=40)) or "refund")
        gateway_event = "MESSAGE_CREATE"
    payload = data.draw(mutated(base, DISCORD_READ))
    try:
        check(gateway_event, payload)
        fits = True
    except ValidationError:
        fits = False
    unchanged = json.dumps(payload) == json.dumps(base)  # `==` takes False for 0
    before = (len(router.arrived), len(router.clicks), len(router.unreadable))
    # discord.py's parsers write into the payload (a message's member gets its user): a copy.
    bot.gateway(gateway_event, copy.deepcopy(payload))  # never raises into the gateway's reader
    await _discord_settled()
    kept = int(not fits and kind != "command")
    event(f"{kind}: {'fits' if fits else 'does not fit'}")
    after = (len(router.arrived), len(router.clicks), len(router.unreadable))
    if unchanged and kind in ("support", "thread"):
        assert after == (before[0] + 1, before[1], before[2]), "not routed, as ever"
    elif unchanged and kind == "click":
        assert after == (before[0], before[1] + 1, before[2]), "not routed, as ever"
    elif not fits:
        await wait_for(
            lambda: _async(len(router.unreadable) == before[2] + kept), what="the dead letter"
        )
    assert sum(after) - sum(before) <= 1  # each event once, at most
    assert loud(caplog) == []


# ---------------------------------------------------------------------------------------------
# The terminal's typed lines
# ---------------------------------------------------------------------------------------------


@dataclass
class Terminal:
    channel: LocalChannel
    out: io.StringIO
    router: RecordingRouter


@pytest.fixture
def terminal(tmp_path: Path) -> Terminal:
    """The local channel, its thread store on SQLite, the router and the commands recording."""
    out, router = io.StringIO(), RecordingRouter()
    threads = LocalThreadStore(SqliteDatabase(tmp_path))
    channel = LocalChannel(threads, router, RecordingCommands(), out=out)
    return Terminal(channel, out, router)


TERMINAL_COMMANDS = [
    "/as",
    "/new",
    "/threads",
    "/thread",
    "/approve",
    "/deny",
    "/crash-worker",
    "/refund-status",
    "/refund-release",
    "/refund-hold",
    "/refund-demo",
    "/refund-grant",
    "/refund-revoke",
    "/help",
    "/nope",
    "/",
]
WORDS = st.sampled_from(
    ["t1", "@support", "presenter", "on", "off", "500", "auto", "'", '"']
) | st.text(max_size=12)
LINES = st.one_of(
    st.text(max_size=80),
    st.sampled_from(["1", "2", "", " ", "\x00", "\x1b[2J", "9" * 5000]),
    st.builds(
        lambda name, words: " ".join([name, *words]),
        st.sampled_from(TERMINAL_COMMANDS),
        st.lists(WORDS, max_size=4),
    ),
)


@pytest.mark.timeout(120)
@settings(FUZZ, max_examples=500)
@given(line=LINES)
async def test_terminal_fuzz(
    terminal: Terminal, caplog: pytest.LogCaptureFixture, line: str
) -> None:
    """About 500 typed lines: text of any characters (NUL, escapes, very long), the channel's
    commands with any words after them, commands it does not have, unbalanced quotes. The
    channel answers each and carries on (only /quit ends it); a message typed is handed to the
    router."""
    caplog.clear()
    before = len(terminal.router.arrived)
    carries_on = await terminal.channel.handle(line)
    assert carries_on is True
    typed_a_message = bool(line) and not line.startswith("/") and line not in ("1", "2")
    assert len(terminal.router.arrived) == before + int(typed_a_message)
    assert "Traceback" not in terminal.out.getvalue()
    assert loud(caplog) == []

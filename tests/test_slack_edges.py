"""Slack requests at the edges: forged is 401, malformed is 400, never 500; commands as typed.

Over real HTTP to the app's aiohttp handler (HTTP mode) and over the fake's Socket Mode WebSocket,
with bodies signed the way Slack signs them; the router and the commands are the recording fakes
of tests/support/slack_app.py (no Temporal here).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qsl, quote_plus

import aiohttp
import pytest
from aiohttp import web
from slack_bolt.request.async_request import AsyncBoltRequest

from agent import http_edge
from agent.models import Actor
from agent.settings import AgentSettings
from agent.stores.grants import GrantStore
from agent.stores.sqlite import SqliteDatabase
from bot.commands import Commands
from bot.hold import HoldSwitch
from bot.slack.app import EVENTS_PATH, build_app, http_web_app, serve
from bot.slack.render import APPROVE_ACTION_ID, unescape
from bot.slack.requests import parse_body
from harness.conditions import wait_for
from harness.fakes.slack_api import FakeSlackApi, JsonDict, SlackSender
from harness.recording_router import RecordingRouter
from tests.support.slack_app import (
    ADMIN,
    CHANNEL,
    FORM,
    JSON,
    SECRET,
    SUPPORT,
    TEAM,
    Endpoint,
    RecordingCommands,
    click_payload,
    interaction,
    posted_escalation,
    served_endpoint,
    settings_for,
    signed,
)


@pytest.fixture(autouse=True)
def _earlier_garbage_collected() -> None:
    """What earlier tests left for the collector is collected before this test's log is read:
    asyncio reports an unclosed aiohttp session when it is collected, in whichever test that is."""
    gc.collect()


@pytest.fixture
async def endpoint(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Endpoint]:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with served_endpoint() as endpoint:
        yield endpoint


def _event(event: Any) -> bytes:
    return json.dumps(
        {"type": "event_callback", "team_id": TEAM, "event_id": "Ev0BAD", "event": event}
    ).encode()


MESSAGE = {"type": "message", "channel": CHANNEL, "user": "U0CUSTOMER", "ts": "1.000001"}

# (name, body, content type): each signed correctly, each not what Slack sends.
MALFORMED: list[tuple[str, bytes, str]] = [
    ("JSON that does not parse", b'{"type": "event_callback", "event": {', JSON),
    ("a JSON array", b"[1, 2, 3]", JSON),
    ("a JSON string", b'"hello"', JSON),
    ("bytes that are not UTF-8", b'{"type": "\xff\xfe"}', JSON),
    ("JSON nested 100,000 deep", b'{"a": ' * 100_000 + b"1" + b"}" * 100_000, JSON),
    ("a payload field nested 100,000 deep", b"payload=" + b"%5B" * 100_000, FORM),
    ("an empty body", b"", FORM),
    ("a payload field that is not JSON", b"payload=%7Bnot+json", FORM),
    ("a payload field that is a JSON list", b"payload=%5B1%5D", FORM),
    ("actions a string", interaction(click_payload("refund_approve")), FORM),
    ("actions an object", interaction(click_payload({"action_id": APPROVE_ACTION_ID})), FORM),
    ("actions a list of strings", interaction(click_payload([APPROVE_ACTION_ID])), FORM),
    ("actions empty", interaction(click_payload([])), FORM),
    ("an action without action_id", interaction(click_payload([{"value": "x"}])), FORM),
    ("an action_id that is a number", interaction(click_payload([{"action_id": 7}])), FORM),
    ("a click's user a string", interaction({**click_payload([]), "user": "U0SAM"}), FORM),
    ("event a list", _event([MESSAGE]), JSON),
    ("event a string", _event("message"), JSON),
    ("a message event's text a number", _event({**MESSAGE, "text": 42}), JSON),
    ("a message event's user an object", _event({**MESSAGE, "user": {"id": "U1"}}), JSON),
    (
        "a shortcut's message a list",
        interaction(
            {
                **click_payload([]),
                "type": "message_action",
                "callback_id": "refund_status",
                "message": [],
            }
        ),
        FORM,
    ),
    (
        "authorizations a number",
        json.dumps({"type": "url_verification", "authorizations": 3}).encode(),
        JSON,
    ),
]


@pytest.mark.parametrize(("name", "body", "content_type"), MALFORMED, ids=[m[0] for m in MALFORMED])
async def test_a_signed_malformed_request_gets_400_and_reaches_nothing(
    endpoint: Endpoint, name: str, body: bytes, content_type: str
) -> None:
    status, text = await endpoint.post(body, signed(body, content_type))
    assert status == 400, f"{name}: {status} {text}"
    assert json.loads(text) == {"error": "malformed request"}
    assert endpoint.router.messages == [] and endpoint.router.clicks == []
    assert endpoint.commands.calls == []


@pytest.mark.parametrize(("name", "body", "content_type"), MALFORMED, ids=[m[0] for m in MALFORMED])
async def test_a_forged_malformed_request_gets_401(
    endpoint: Endpoint, name: str, body: bytes, content_type: str
) -> None:
    # The signature is checked before the body is read: a forger learns nothing about parsing.
    forged = signed(body, content_type, secret="not-the-signing-secret")
    assert (await endpoint.post(body, forged))[0] == 401, name


async def test_bad_signature_headers_get_401(endpoint: Endpoint) -> None:
    body = b'{"type": "event_callback", "event": {'
    good = signed(body, JSON)
    for headers in (
        {**good, "X-Slack-Request-Timestamp": "not-a-number"},
        {**good, "X-Slack-Request-Timestamp": "١٧٣٢٨٦٠٠٠٠"},  # digits, but not ASCII ones
        {**good, "X-Slack-Request-Timestamp": str(int(time.time()) - 6 * 60)},  # replayed
        {**good, "X-Slack-Signature": "v0=" + "é" * 64},
        {"Content-Type": JSON},  # unsigned
    ):
        assert (await endpoint.post(body, headers))[0] == 401, headers


async def test_well_formed_requests_still_work_after_the_checks(endpoint: Endpoint) -> None:
    root = endpoint.sender.post(CHANNEL, "please refund order 1234")
    status, _ = await endpoint.post(root.body.encode(), signed(root.body.encode(), JSON))
    assert status == 200

    async def routed() -> bool:
        return len(endpoint.router.messages) == 1

    await wait_for(routed, timeout=5, what="the message routed")
    _, escalation_ts, wid = await posted_escalation(endpoint.slack)
    click = endpoint.sender.click(
        CHANNEL, escalation_ts, APPROVE_ACTION_ID, user=SUPPORT[0], name=SUPPORT[1]
    )
    status, _ = await endpoint.post(click.body.encode(), signed(click.body.encode(), FORM))
    assert status == 200

    async def clicked() -> bool:
        return len(endpoint.router.clicks) == 1

    await wait_for(clicked, timeout=5, what="the click routed")
    assert endpoint.router.clicks[0].workflow_id == wid


async def test_a_command_whose_text_says_payload_is_answered(endpoint: Endpoint) -> None:
    # bolt's parse_body took any form body containing "payload" for an interaction: 404.
    assert (await endpoint.command("/refund-status", "payload")).startswith("Which conversation?")
    assert await endpoint.command("/refund-hold", "payload") == "Usage: /refund-hold [on|off]"
    assert await endpoint.command("/refund-grant", "<@U0SAM|sam> payload") == "refund_grant done"
    ((name, (_, target, role, limit)),) = endpoint.commands.calls
    assert (name, target.user_id, role, limit) == ("refund_grant", "U0SAM", "payload", None)


async def test_command_text_is_unescaped_before_it_is_parsed(endpoint: Endpoint) -> None:
    root_ts = endpoint.slack.add_message(CHANNEL, "refund 1234")
    reply_ts = endpoint.slack.add_message(CHANNEL, "Yes", thread_ts=root_ts)
    base = f"https://fake-workspace.slack.com/archives/{CHANNEL}/p{reply_ts.replace('.', '')}"
    # As Slack sends a pasted reply link: wrapped in <…>, its `&` escaped. With `cid` first, the
    # escaped `&amp;thread_ts=` used to lose the thread and name the reply's own "thread".
    for link in (
        f"<{base}?cid={CHANNEL}&amp;thread_ts={root_ts}>",
        f"{base}?thread_ts={root_ts}&amp;cid={CHANNEL}",
    ):
        await endpoint.command("/refund-status", link)
    wid = f"slack-{TEAM}-{CHANNEL}-{root_ts}"
    assert [args[1] for _, args in endpoint.commands.calls] == [wid, wid]


@pytest.mark.parametrize(
    "form",
    [
        "command=%2Frefund-status&text=order+1234+%2B+a%25+caf%C3%A9+%F0%9F%98%80",
        "text=&user_id=U0SAM&flag&=x&&text=again",  # blank, bare, nameless, empty, repeated
        "text=%zz%E9%FF+%2",  # escapes that do not decode are kept or replaced, as urllib does
        "a=b;c=d",  # `;` is not a separator (Python 3.10 and later)
    ],
)
def test_a_form_body_parses_as_urllib_parses_it(form: str) -> None:
    # Slash commands are form bodies; yarl's query_to_pairs parses them in place of parse_qsl.
    expected = dict(parse_qsl(form, keep_blank_values=True))
    assert parse_body(form.encode(), "application/x-www-form-urlencoded") == expected


def test_unescape_undoes_exactly_slacks_three_escapes() -> None:
    assert unescape("a &amp; b &lt;c&gt;") == "a & b <c>"
    assert unescape("&amp;lt; stays &lt; as typed") == "&lt; stays < as typed"
    assert unescape("&quot;&#39;") == "&quot;&#39;"  # Slack does not escape these


async def test_socket_mode_drops_a_malformed_envelope_and_acks_it(endpoint: Endpoint) -> None:
    slack = endpoint.slack
    settings = settings_for(slack, app_token=slack.app_token, signing_secret=None)
    router, commands = RecordingRouter(), RecordingCommands()
    app = build_app(settings, router, commands)
    serving = asyncio.create_task(serve(app, settings))
    try:

        async def connected() -> bool:
            return slack.socket_connections == 1

        await wait_for(connected, timeout=10, what="the Socket Mode connection")

        async def acked(envelope_id: str) -> bool:
            return any(a["envelope_id"] == envelope_id for a in slack.socket_acks)

        bad = [
            await slack.socket_send("interactive", click_payload("refund_approve")),
            await slack.socket_send("interactive", click_payload([{"value": 1}])),
            await slack.socket_send(
                "events_api", json.loads(_event({**MESSAGE, "text": ["not", "text"]}))
            ),
        ]
        for envelope in bad:
            await wait_for(
                functools.partial(acked, envelope), timeout=5, what="the bad envelope acked"
            )

        # The same command text over Socket Mode (payloads arrive parsed: no "payload" mistake).
        command = endpoint.sender.command("/refund-status", "payload", user=ADMIN[0], name=ADMIN[1])
        envelope = await slack.socket_send("slash_commands", command.payload)
        await wait_for(lambda: acked(envelope), timeout=5, what="the command acked")

        async def answered() -> list[JsonDict]:
            return slack.responses

        (answer,) = await wait_for(answered, timeout=5, what="the command's answer")
        assert answer["text"].startswith("Which conversation?")
        assert router.messages == [] and router.clicks == [] and commands.calls == []
    finally:
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving


# ---------------------------------------------------------------------------------------------
# Hostile input: never a 500, nothing acknowledged and then lost, one line in the log
# ---------------------------------------------------------------------------------------------


def loud(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What input must never cause: a traceback, or anything at ERROR."""
    return [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def test_a_timestamp_of_5000_digits_is_401(
    endpoint: Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces an unsigned request with a 5,000-digit X-Slack-Request-Timestamp answered 500:
    int() refuses strings past Python's 4,300 digits with a ValueError."""
    body = b'{"type": "event_callback"}'
    for timestamp in ("1" * 5000, "1" * 13, str(int(time.time())) + "0" * 3):
        headers = {**signed(body, JSON), "X-Slack-Request-Timestamp": timestamp}
        assert (await endpoint.post(body, headers))[0] == 401, len(timestamp)
    assert loud(caplog) == []


async def test_a_body_that_does_not_decode_as_its_encoding_says_is_400(
    endpoint: Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces a forged body sent with Content-Encoding: gzip that is not gzip answered 500:
    request.read() raised aiohttp's payload error out of the handler."""
    for encoding in ("gzip", "deflate", "br"):
        headers = {"Content-Type": JSON, "Content-Encoding": encoding}
        status, _ = await endpoint.post(b"this is not " + encoding.encode(), headers)
        assert status == 400, encoding
    assert loud(caplog) == []
    assert endpoint.router.messages == [] and endpoint.router.unreadable == []


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "url_verification", "challenge": "c-1", "event": [1]},
        {"type": "interactive_message", "user": {"id": "U1"}, "callback_id": "x"},
        {"type": "interactive_message", "callback_id": "x", "actions": None},
        {"type": "workflow_step_edit", "user": {"id": "U1"}, "callback_id": "x"},
        {"type": "view_submission", "view": [1]},
        {"type": "event_callback", "event": {"type": "app_mention", "text": 5}},
    ],
    ids=lambda p: json.dumps(p),
)
@pytest.mark.parametrize("form", [True, False], ids=["form", "json"])
async def test_bodies_bolt_cannot_read_never_reach_it(
    endpoint: Endpoint, payload: JsonDict, form: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces signed bodies that passed the shape check and made bolt's middleware raise,
    answered 500: url_verification with "event": [1], interactive_message without actions,
    workflow_step_edit without workflow_step. Only the kinds refund-bot handles reach bolt now."""
    body = interaction(payload) if form else json.dumps(payload).encode()
    status, text = await endpoint.post(body, signed(body, FORM if form else JSON))
    if payload["type"] == "url_verification":
        assert (status, json.loads(text)) == (200, {"challenge": "c-1"})
    else:
        assert (status, text) == (200, "")
    assert loud(caplog) == []


@pytest.mark.parametrize(
    ("name", "body", "content_type"),
    [
        ("an event type not subscribed", _event({"type": "reaction_added", "user": "U1"}), JSON),
        ("app_rate_limited", b'{"type": "app_rate_limited", "minute_rate_limited": 1}', JSON),
        ("an empty object", b"{}", JSON),
        ("a form without a command", b"token=x&text=hello&user_id=U1", FORM),
        ("ssl_check", b"ssl_check=1&token=x", FORM),
        ("a command this app has not", None, FORM),
        ("a button that is not ours", interaction(click_payload([{"action_id": "x"}])), FORM),
    ],
)
async def test_requests_refund_bot_does_not_handle_are_200_so_slack_does_not_retry(
    endpoint: Endpoint, name: str, body: bytes | None, content_type: str
) -> None:
    """Reproduces signed requests refund-bot has no listener for (unknown event types,
    app_rate_limited, {}, a form without a command) answered with bolt's 404 "unhandled
    request": Slack retries a 404."""
    if body is None:
        delivery = endpoint.sender.command("/not-refund-bot", "", user=ADMIN[0], name=ADMIN[1])
        body = delivery.body.encode()
    assert await endpoint.post(body, signed(body, content_type)) == (200, ""), name
    assert endpoint.commands.calls == [] and endpoint.router.clicks == []


def _message_with(**fields: Any) -> JsonDict:
    event = {**MESSAGE, "channel": CHANNEL, "text": "refund 1234", **fields}
    return {"type": "event_callback", "team_id": TEAM, "event_id": "Ev0NESTED", "event": event}


def _click_with(**fields: Any) -> JsonDict:
    return {**click_payload([{"action_id": APPROVE_ACTION_ID}]), **fields}


SHORTCUT = {**click_payload([]), "type": "message_action", "callback_id": "refund_status"}
NESTED = [
    ("a message's display_name a number", _message_with(user_profile={"display_name": 7})),
    ("a message's user_profile a list", _message_with(user_profile=["sam"])),
    ("a message's bot_profile a string", _message_with(bot_profile="bot")),
    ("a click's team.id a number", _click_with(team={"id": 7})),
    ("a click's container a list", _click_with(container=[])),
    ("a click's message.blocks a string", _click_with(message={"blocks": "x"})),
    ("a click's user.name a list", _click_with(user={"id": "U1", "name": []})),
    ("a shortcut's channel.id a number", {**SHORTCUT, "channel": {"id": 5}}),
]


@pytest.mark.parametrize(("name", "payload"), NESTED, ids=[n for n, _ in NESTED])
async def test_nested_fields_of_the_wrong_type_are_refused_before_the_ack(
    endpoint: Endpoint, name: str, payload: JsonDict, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces a message or click whose nested fields have unexpected types answered 200, then
    crashing its listener with a traceback: the customer's message gone without a trace. Over
    HTTP it is refused before the ack, so Slack keeps it and says so."""
    form = payload["type"] != "event_callback"
    body = interaction(payload) if form else json.dumps(payload).encode()
    status, _ = await endpoint.post(body, signed(body, FORM if form else JSON))
    assert status == 400, name
    assert loud(caplog) == []


@pytest.mark.parametrize(("name", "payload"), NESTED[:4], ids=[n for n, _ in NESTED[:4]])
async def test_an_acknowledged_event_that_cannot_be_read_is_kept_as_a_dead_letter(
    name: str, payload: JsonDict, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces an acknowledged message or click with nested fields of unexpected types
    crashing its listener and leaving no trace: handed to bolt without the edge (as a direct
    dispatch does), the listener keeps it as a dead letter with its reason."""
    async with FakeSlackApi(team_id=TEAM) as slack:
        endpoint = Endpoint(slack)
        form = payload["type"] != "event_callback"
        body = interaction(payload) if form else json.dumps(payload).encode()
        headers = signed(body, FORM if form else JSON)
        request = AsyncBoltRequest(body=body.decode(), headers=headers)  # type: ignore[arg-type]
        response = await endpoint.app.async_dispatch(request)
        assert response.status == 200
        (kept,) = await wait_for(
            lambda: endpoint.router.unreadable, timeout=5, what="the dead letter"
        )
        await endpoint.app.client.close()  # type: ignore[attr-defined]
    assert kept.platform == "slack" and kept.kind == ("click" if form else "message")
    assert json.loads(kept.payload) == payload and kept.reason
    assert endpoint.router.messages == [] and endpoint.router.clicks == []
    assert loud(caplog) == []


async def test_a_link_is_parsed_after_the_role_check_and_a_malformed_one_is_a_plain_answer(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces /refund-status https://[::1/... raising in urlsplit (a traceback, and "That
    command failed on our side"), from any member of the workspace: the link was parsed, and an
    order number searched for, before the role check."""
    grants = GrantStore(SqliteDatabase(tmp_path))
    seed = Actor(platform="local", user_id="seed")
    await grants.grant(Actor(platform="slack", user_id=ADMIN[0]), "presenter", None, by=seed)
    settings = AgentSettings(_env_file=None, data_dir=tmp_path)
    hold = HoldSwitch(SqliteDatabase(tmp_path), default=False)
    commands = Commands(None, None, settings, grants, hold)  # type: ignore[arg-type]
    searched: list[str] = []

    async def find_by_order(team_id: str, order: str) -> str | None:
        searched.append(order)
        return None

    async with FakeSlackApi(team_id=TEAM) as slack:
        sender = SlackSender(slack)
        app = build_app(
            settings_for(slack), RecordingRouter(), commands, find_by_order=find_by_order
        )
        runner = http_edge.runner(http_web_app(app, SECRET))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}{EVENTS_PATH}"

        async def run(command: str, text: str, user: tuple[str, str]) -> str:
            delivery = sender.command(command, text, user=user[0], name=user[1])
            before = len(slack.responses)
            body = delivery.body.encode()
            async with (
                aiohttp.ClientSession() as http,
                http.post(url, data=body, headers=signed(body, FORM)) as resp,
            ):
                assert resp.status == 200
            await wait_for(lambda: len(slack.responses) > before, timeout=5, what="the answer")
            return slack.responses[-1]["text"]

        try:
            malformed = "https://[::1/archives/C0SUPPORT/p1732860000000100"
            for command in ("/refund-status", "/refund-release"):
                for text in (malformed, f"<{malformed}>", "4500"):
                    answer = await run(command, text, SUPPORT)  # no role
                    assert "needs the presenter" in answer and "failed" not in answer, answer
                    answer = await run(command, text, ADMIN)  # a presenter
                    assert "Which conversation?" in answer or "No open conversation" in answer
        finally:
            await runner.cleanup()
            await app.client.close()  # type: ignore[attr-defined]
    assert searched == ["4500", "4500"]  # only the presenter's order numbers were looked up
    assert loud(caplog) == []


@pytest.mark.parametrize("response_url", ["", "not a url", "/relative", "https://[::1/x", None])
async def test_a_command_without_a_usable_response_url_is_refused_before_the_ack(
    endpoint: Endpoint, response_url: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces a command with no usable response_url acknowledged, then `respond` raising
    in its listener (a traceback, and the caller never answered)."""
    fields = dict(
        parse_qsl(endpoint.sender.command("/refund-hold", "", user=ADMIN[0], name=ADMIN[1]).body)
    )
    if response_url is None:
        del fields["response_url"]
    else:
        fields["response_url"] = response_url
    body = "&".join(f"{k}={quote_plus(v)}" for k, v in fields.items()).encode()
    assert (await endpoint.post(body, signed(body, FORM)))[0] == 400
    # After it, the same command with its response_url: once it is answered, a listener for the
    # refused one would have run as well.
    assert (await endpoint.command("/refund-hold", "")) == "refund_hold done"
    assert [name for name, _ in endpoint.commands.calls] == ["refund_hold"]
    assert loud(caplog) == []


async def test_socket_mode_acks_what_it_does_not_handle_and_keeps_what_it_cannot_read(
    endpoint: Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces Socket Mode leaving unhandled envelopes unacknowledged (bolt's 404: Slack
    sends them again), and acknowledging a message whose nested fields have unexpected types,
    then losing it in a crashed listener."""
    slack = endpoint.slack
    settings = settings_for(slack, app_token=slack.app_token, signing_secret=None)
    router = RecordingRouter()
    app = build_app(settings, router, RecordingCommands())
    serving = asyncio.create_task(serve(app, settings))
    try:
        await wait_for(lambda: slack.socket_connections == 1, timeout=10, what="Socket Mode")

        async def acked(envelope_id: str) -> bool:
            return any(a["envelope_id"] == envelope_id for a in slack.socket_acks)

        unhandled = [
            await slack.socket_send("events_api", json.loads(_event({"type": "app_mention"}))),
            await slack.socket_send("events_api", {"type": "app_rate_limited"}),
            await slack.socket_send("interactive", {**click_payload([]), "type": "shortcut"}),
            await slack.socket_send(
                "interactive", {"type": "interactive_message", "callback_id": "x"}
            ),
        ]
        unreadable = [
            await slack.socket_send("events_api", _message_with(user_profile={"real_name": 1})),
            await slack.socket_send("interactive", NESTED[3][1]),
        ]
        for envelope in unhandled + unreadable:
            await wait_for(functools.partial(acked, envelope), timeout=5, what="the envelope acked")
        await wait_for(lambda: len(router.unreadable) == 2, timeout=5, what="two dead letters")
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
    assert [u.kind for u in router.unreadable] == ["message", "click"]
    assert json.loads(router.unreadable[0].payload)["event"]["user_profile"] == {"real_name": 1}
    assert router.messages == [] and router.clicks == []
    assert loud(caplog) == []


async def test_socket_mode_acks_an_envelope_whose_payload_is_not_an_object(
    endpoint: Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces an envelope whose payload is a list, a number or null: the SDK raised before
    the handler saw it, logged an error, and never acknowledged it (Slack sends it again)."""
    slack = endpoint.slack
    settings = settings_for(slack, app_token=slack.app_token, signing_secret=None)
    router = RecordingRouter()
    app = build_app(settings, router, RecordingCommands())
    serving = asyncio.create_task(serve(app, settings))
    try:
        await wait_for(lambda: slack.socket_connections == 1, timeout=10, what="Socket Mode")
        sent = [
            await slack.socket_send("events_api", [1, 2]),  # type: ignore[arg-type]
            await slack.socket_send("interactive", None),  # type: ignore[arg-type]
            await slack.socket_send("slash_commands", 7),  # type: ignore[arg-type]
        ]
        for envelope in sent:

            async def acked(envelope: str = envelope) -> bool:
                return any(a["envelope_id"] == envelope for a in slack.socket_acks)

            await wait_for(acked, timeout=5, what="the envelope acked")
        await wait_for(lambda: len(router.unreadable) == 2, timeout=5, what="two dead letters")
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
    assert [(u.kind, json.loads(u.payload)) for u in router.unreadable] == [
        ("message", [1, 2]),
        ("click", None),
    ]
    assert loud(caplog) == []

"""A local stand-in for the Slack Web API, served over real HTTP so slack_sdk runs unmodified.

It models only what refund-bot calls: auth.test, chat.postMessage, chat.update, chat.postEphemeral,
conversations.replies and usergroups.users.list, with Slack's payload shapes, its HTTP-200-with-
`ok: false` errors, bearer token checks, cursor pagination and 429 + Retry-After, and outages
(every call answered with HTTP 500, or never answered); plus the
`response_url` webhooks Slack hands out with slash commands and interactions, and Socket Mode
(apps.connections.open with the app-level token, then a WebSocket that says hello, sends envelopes
and records the app's acks). Use it as an async context manager:

    async with FakeSlackApi() as slack:
        root = slack.add_message("C0SUPPORT", "my order arrived broken")
        client = AsyncWebClient(token=slack.token, base_url=slack.url)
        ...
        assert len(slack.calls_to("chat.postMessage")) == 1
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from ssl import SSLContext
from typing import Any, Literal

from aiohttp import WSMsgType, web

from bot.slack.settings import SlackSettings

JsonDict = dict[str, Any]

# How many times one response_url accepts a message.
RESPONSE_URL_USES = 5

# An outage of the whole Web API: "error" answers every call with HTTP 500 (Slack's internal_error),
# "silent" never answers (the call waits until the outage ends, then its connection is dropped).
Outage = Literal["error", "silent"]

# Web API arguments that hold JSON: in a JSON body they are objects, in a form body JSON strings.
_JSON_ARGS = ("blocks", "attachments", "metadata")


@dataclass(frozen=True)
class RecordedCall:
    method: str  # Web API method, e.g. "chat.postMessage"
    params: JsonDict  # query string and body merged, JSON-valued arguments decoded, token removed
    http_method: str
    content_type: str
    status: int  # the HTTP status the fake answered with
    error: str | None  # Slack's `error` code when ok was false
    at: float  # time.monotonic() when the request arrived
    connection: int  # the client's port: calls with the same one came over one connection


@dataclass
class _Fault:
    status: int
    error: str
    retry_after: int | None = None


@dataclass
class _Message:
    channel: str
    ts: str
    user: str
    text: str
    thread_ts: str | None = None
    bot: bool = False
    blocks: list[JsonDict] | None = None
    metadata: JsonDict | None = None
    extra: JsonDict = field(default_factory=dict)


class SlackApiError(Exception):
    """An `ok: false` answer raised inside a handler; becomes HTTP 200 like Slack's own."""

    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra


class FakeSlackApi:
    """Slack Web API fake on 127.0.0.1, an ephemeral port; base URL in `url` once started."""

    def __init__(
        self,
        *,
        token: str = "xoxb-fake-0000-token",
        app_token: str = "xapp-1-A0FAKE-0000-fake",
        team_id: str = "T0FAKE",
        team: str = "Fake Workspace",
        bot_user_id: str = "U0REFUNDBOT",
        bot_id: str = "B0REFUNDBOT",
        app_id: str = "A0REFUNDBOT",
        unknown_channels: Iterable[str] = (),
        channels_without_bot: Iterable[str] = (),
        ssl: SSLContext | None = None,
    ) -> None:
        self.token = token
        self.app_token = app_token
        self.team_id = team_id
        self.team = team
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.app_id = app_id
        # Channel ids starting with C or G exist unless listed here (keep it simple: no directory).
        self.unknown_channels = set(unknown_channels)
        self.channels_without_bot = set(channels_without_bot)

        self.calls: list[RecordedCall] = []
        self.ephemerals: list[JsonDict] = []  # never part of channel history, as in Slack
        # What apps posted to response_url webhooks: the JSON body plus "url" and "kind".
        self.responses: list[JsonDict] = []
        self.usergroups: dict[str, list[str]] = {}  # user-group id (S…) -> member ids
        self._messages: dict[str, list[_Message]] = {}
        self._hooks: dict[str, int] = {}  # response_url path -> uses left
        # Socket Mode: the app's acks as received (envelope_id, payload?, "at": monotonic time).
        self.socket_acks: list[JsonDict] = []
        self._tickets: set[str] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self._faults: dict[str, deque[_Fault]] = {}
        self._outage: Outage | None = None
        self._outage_over = asyncio.Event()
        self._clock_us = int(time.time() * 1_000_000)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._ssl = ssl  # served over TLS with it (the client must trust its certificate)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL for `AsyncWebClient(base_url=...)` / `SLACK_API_URL`."""
        if self._port is None:
            raise RuntimeError("FakeSlackApi is not started")
        scheme = "https" if self._ssl else "http"
        return f"{scheme}://127.0.0.1:{self._port}/api/"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle)
        app.router.add_post("/hooks/{kind}/{team}/{hook}/{secret}", self._handle_hook)
        app.router.add_get("/link/", self._handle_socket)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._ssl)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        for socket in list(self._sockets):
            await socket.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeSlackApi:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- arranging and asserting -------------------------------------------------------------

    def app_settings(
        self, *, signing_secret: str, support_channel: str, **overrides: Any
    ) -> SlackSettings:
        """The bot's Slack settings, pointed at this fake (HTTP mode: no app token)."""
        values: dict[str, Any] = {
            "bot_token": self.token,
            "signing_secret": signing_secret,
            "support_channel": support_channel,
            "api_url": self.url,
            **overrides,
        }
        return SlackSettings(_env_file=None, **values)

    def add_message(
        self, channel: str, text: str, *, user: str = "U0CUSTOMER", thread_ts: str | None = None
    ) -> str:
        """Seed a human's message (a thread root when thread_ts is None); returns its ts."""
        message = _Message(
            channel=channel,
            ts=self._next_ts(),
            user=user,
            text=text,
            thread_ts=thread_ts,
            extra={"client_msg_id": str(uuid.uuid4())},
        )
        self._messages.setdefault(channel, []).append(message)
        return message.ts

    def add_usergroup(self, usergroup: str, users: Iterable[str]) -> None:
        """Create (or replace the members of) a user group, as an admin would in Slack."""
        self.usergroups[usergroup] = list(users)

    def response_url(self, kind: str = "commands") -> str:
        """Mint a response_url as Slack puts one in a payload (kind: commands, actions, app)."""
        hook = f"/hooks/{kind}/{self.team_id}/{uuid.uuid4().int % 10**13}/{uuid.uuid4().hex[:24]}"
        # Slack allows five uses within 30 minutes; the clock is left out here.
        self._hooks[hook] = RESPONSE_URL_USES
        return f"{self.url.removesuffix('/api/')}{hook}"

    def message(self, channel: str, ts: str) -> JsonDict | None:
        """One stored message as the Web API shows it (with metadata), or None."""
        found = self._find(channel, ts)
        return self._public(found, include_metadata=True) if found else None

    def rate_limit(self, method: str, *, times: int = 1, retry_after: int = 1) -> None:
        """Answer the next `times` calls of `method` with HTTP 429 and `Retry-After`."""
        queue = self._faults.setdefault(method, deque())
        queue.extend(_Fault(429, "ratelimited", retry_after) for _ in range(times))

    def fail(self, method: str, error: str, *, times: int = 1, status: int = 200) -> None:
        """Answer the next `times` calls of `method` with `ok: false` and `error`."""
        queue = self._faults.setdefault(method, deque())
        queue.extend(_Fault(status, error) for _ in range(times))

    def outage(self, kind: Outage | None) -> None:
        """Every Web API call fails from now on, as `kind` says, until `outage(None)`: what the
        apps see of a Slack incident. Calls already answered stay answered; a "silent" call that
        is waiting when the outage ends is dropped unanswered, with nothing done."""
        self._outage = kind
        if kind is None:
            self._outage_over.set()
        else:
            self._outage_over.clear()

    def open_connections(self) -> int:
        """How many HTTP connections clients hold open to this fake now (kept alive or busy)."""
        assert self._runner is not None and self._runner.server is not None
        return len(self._runner.server.connections)

    def calls_to(self, method: str) -> list[RecordedCall]:
        return [call for call in self.calls if call.method == method]

    def thread(self, channel: str, thread_ts: str) -> list[JsonDict]:
        """Root first, then replies, as conversations.replies would show them with metadata."""
        return [self._public(m, include_metadata=True) for m in self._thread(channel, thread_ts)]

    def history(self, channel: str) -> list[JsonDict]:
        """Every stored message in the channel, oldest first, replies included."""
        return [self._public(m, include_metadata=True) for m in self._messages.get(channel, [])]

    # -- HTTP --------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        method = request.match_info["method"]
        params, body_token = await _read_params(request)
        if self._outage == "silent":
            await self._outage_over.wait()
            # Nothing was done: the connection closes without an answer.
            if request.transport is not None:
                request.transport.close()
            raise web.HTTPServiceUnavailable
        status: int
        payload: JsonDict
        headers: dict[str, str]
        if self._outage == "error":
            status, payload, headers = 500, {"ok": False, "error": "internal_error"}, {}
        else:
            status, payload, headers = self._dispatch(method, params, request, body_token)
        assert request.transport is not None  # the connection is open while it is answered
        self.calls.append(
            RecordedCall(
                method=method,
                params=params,
                http_method=request.method,
                content_type=request.content_type,
                status=status,
                error=None if payload.get("ok") else payload.get("error"),
                at=arrived,
                connection=request.transport.get_extra_info("peername")[1],
            )
        )
        return web.json_response(payload, status=status, headers=headers)

    def _dispatch(
        self, method: str, params: JsonDict, request: web.Request, body_token: str | None
    ) -> tuple[int, JsonDict, dict[str, str]]:
        handler = _METHODS.get(method)
        if handler is None:
            return 404, {"ok": False, "error": "unknown_method"}, {}

        # Slack takes the token from the Authorization header or a POST body field, not the URL.
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else body_token
        if not token:
            return 200, {"ok": False, "error": "not_authed"}, {}
        # Socket Mode's method takes the app-level token only; every other method the bot token.
        expected = self.app_token if method in _APP_TOKEN_METHODS else self.token
        if token != expected:
            wrong_kind = token in (self.token, self.app_token)
            error = "not_allowed_token_type" if wrong_kind else "invalid_auth"
            return 200, {"ok": False, "error": error}, {}

        queue = self._faults.get(method)
        if queue:
            fault = queue.popleft()
            headers = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
            return fault.status, {"ok": False, "error": fault.error}, headers

        try:
            return 200, {"ok": True, **handler(self, params)}, {}
        except SlackApiError as exc:
            return 200, {"ok": False, "error": exc.error, **exc.extra}, {}

    async def _handle_hook(self, request: web.Request) -> web.Response:
        hook = request.path
        left = self._hooks.get(hook)
        if left is None:
            return web.Response(status=404, text="no_active_hooks")
        if left <= 0:
            return web.Response(status=404, text="used_url")
        self._hooks[hook] = left - 1
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.Response(status=400, text="invalid_payload")
        if not isinstance(body, dict) or not (body.get("text") or body.get("blocks")):
            return web.Response(status=400, text="no_text")
        self.responses.append({**body, "url": str(request.url), "kind": request.match_info["kind"]})
        return web.Response(text="ok")

    # -- Socket Mode -------------------------------------------------------------------------

    @property
    def socket_connections(self) -> int:
        return len(self._sockets)

    async def socket_send(
        self,
        envelope_type: str,
        payload: JsonDict,
        *,
        retry_attempt: int = 0,
        retry_reason: str = "",
    ) -> str:
        """Send one envelope (events_api, slash_commands, interactive) to the connected app."""
        if not self._sockets:
            raise RuntimeError("no Socket Mode connection")
        envelope_id = str(uuid.uuid4())
        envelope: JsonDict = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": envelope_type,
            "accepts_response_payload": envelope_type != "events_api",
        }
        if envelope_type == "events_api":
            envelope.update(retry_attempt=retry_attempt, retry_reason=retry_reason)
        await self._sockets[-1].send_json(envelope)
        return envelope_id

    async def close_sockets(self) -> None:
        """Slack drops every Socket Mode connection (a deploy on its side, a network cut)."""
        for socket in list(self._sockets):
            await socket.close()

    def _apps_connections_open(self, params: JsonDict) -> JsonDict:
        ticket = uuid.uuid4().hex
        self._tickets.add(ticket)
        host = self.url.removeprefix("http://").removesuffix("/api/")
        return {"url": f"ws://{host}/link/?ticket={ticket}&app_id={self.app_id}"}

    async def _handle_socket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid ticket")
        self._tickets.discard(ticket)  # a WSS URL is good for one connection
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        self._sockets.append(socket)
        try:
            await socket.send_json(
                {
                    "type": "hello",
                    "num_connections": len(self._sockets),
                    "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
                    "connection_info": {"app_id": self.app_id},
                }
            )
            async for message in socket:
                if message.type == WSMsgType.TEXT:
                    self.socket_acks.append({**json.loads(message.data), "at": time.monotonic()})
        finally:
            self._sockets.remove(socket)
        return socket

    # -- methods -----------------------------------------------------------------------------

    def _auth_test(self, params: JsonDict) -> JsonDict:
        return {
            "url": "https://fake-workspace.slack.com/",
            "team": self.team,
            "user": "refund-bot",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _chat_post_message(self, params: JsonDict) -> JsonDict:
        channel = self._require_member_channel(params)
        text, blocks = _text_and_blocks(params)
        thread_ts = params.get("thread_ts") or None
        if thread_ts is not None:
            parent = self._find(channel, str(thread_ts))
            # A reply to a reply joins the parent's thread.
            thread_ts = (parent.thread_ts or parent.ts) if parent else str(thread_ts)
        message = _Message(
            channel=channel,
            ts=self._next_ts(),
            user=self.bot_user_id,
            text=text,
            thread_ts=thread_ts,
            bot=True,
            blocks=blocks,
            metadata=_metadata(params),
        )
        self._messages.setdefault(channel, []).append(message)
        return {
            "channel": channel,
            "ts": message.ts,
            "message": self._public(message, include_metadata=True),
        }

    def _chat_update(self, params: JsonDict) -> JsonDict:
        channel = self._require_member_channel(params)
        message = self._find(channel, str(params.get("ts") or ""))
        if message is None:
            raise SlackApiError("message_not_found")
        if not message.bot:
            raise SlackApiError("cant_update_message")
        text, blocks = _text_and_blocks(params)
        message.text, message.blocks = text, blocks
        if "metadata" in params:
            message.metadata = _metadata(params)
        message.extra["edited"] = {"user": self.bot_user_id, "ts": self._next_ts()}
        return {
            "channel": channel,
            "ts": message.ts,
            "text": message.text,
            "message": self._public(message, include_metadata=True),
        }

    def _chat_post_ephemeral(self, params: JsonDict) -> JsonDict:
        channel = self._require_member_channel(params)
        if not params.get("user"):
            raise SlackApiError("user_not_in_channel")
        text, blocks = _text_and_blocks(params)
        ts = self._next_ts()
        self.ephemerals.append(
            {
                "channel": channel,
                "user": params["user"],
                "text": text,
                "blocks": blocks,
                "thread_ts": params.get("thread_ts"),
                "message_ts": ts,
            }
        )
        return {"message_ts": ts}

    def _usergroups_users_list(self, params: JsonDict) -> JsonDict:
        group = str(params.get("usergroup") or "")
        if not group:
            raise SlackApiError("invalid_arguments")
        if group not in self.usergroups:
            raise SlackApiError("no_such_subteam")
        return {"users": list(self.usergroups[group])}

    def _conversations_replies(self, params: JsonDict) -> JsonDict:
        channel = self._require_member_channel(params)
        anchor = self._find(channel, str(params.get("ts") or ""))
        if anchor is None:
            raise SlackApiError("thread_not_found")
        messages = self._thread(channel, anchor.thread_ts or anchor.ts)

        limit = _int(params.get("limit"), default=1000)
        if not 1 <= limit <= 1000:
            limit = 1000
        start = 0
        if params.get("cursor"):
            next_ts = _decode_cursor(str(params["cursor"]))
            start = next((i for i, m in enumerate(messages) if m.ts >= next_ts), len(messages))
        page = messages[start : start + limit]
        has_more = start + limit < len(messages)

        include_metadata = _truthy(params.get("include_all_metadata"))
        response: JsonDict = {
            "messages": [self._public(m, include_metadata=include_metadata) for m in page],
            "has_more": has_more,
        }
        if has_more:
            response["response_metadata"] = {
                "next_cursor": _encode_cursor(messages[start + limit].ts)
            }
        return response

    # -- helpers -----------------------------------------------------------------------------

    def _require_member_channel(self, params: JsonDict) -> str:
        channel = str(params.get("channel") or "")
        if channel[:1] not in ("C", "G") or channel in self.unknown_channels:
            raise SlackApiError("channel_not_found")
        if channel in self.channels_without_bot:
            raise SlackApiError("not_in_channel")
        return channel

    def _next_ts(self) -> str:
        # Slack's ts is "seconds.microseconds", unique and increasing within a channel.
        self._clock_us = max(self._clock_us + 100, int(time.time() * 1_000_000))
        return f"{self._clock_us // 1_000_000}.{self._clock_us % 1_000_000:06d}"

    def _find(self, channel: str, ts: str) -> _Message | None:
        return next((m for m in self._messages.get(channel, []) if m.ts == ts), None)

    def _thread(self, channel: str, root_ts: str) -> list[_Message]:
        in_channel = self._messages.get(channel, [])
        root = [m for m in in_channel if m.ts == root_ts]
        replies = [m for m in in_channel if m.thread_ts == root_ts and m.ts != root_ts]
        return root + sorted(replies, key=lambda m: m.ts)

    def _public(self, message: _Message, *, include_metadata: bool) -> JsonDict:
        """The message object as Slack's Web API shows it."""
        out: JsonDict = {"type": "message", "user": message.user, "text": message.text}
        if message.bot:
            out.update(bot_id=self.bot_id, app_id=self.app_id)
        out.update(message.extra)
        out["ts"] = message.ts
        out["team"] = self.team_id
        if message.blocks is not None:
            out["blocks"] = message.blocks
        if message.thread_ts is not None and message.thread_ts != message.ts:
            root = self._find(message.channel, message.thread_ts)
            out["thread_ts"] = message.thread_ts
            out["parent_user_id"] = root.user if root else message.user
        else:
            replies = self._thread(message.channel, message.ts)[1:]
            if replies:
                users = list(dict.fromkeys(r.user for r in replies))
                out.update(
                    thread_ts=message.ts,
                    reply_count=len(replies),
                    reply_users_count=len(users),
                    latest_reply=replies[-1].ts,
                    reply_users=users,
                    is_locked=False,
                    subscribed=False,
                )
        if include_metadata and message.metadata is not None:
            out["metadata"] = message.metadata
        return out


_METHODS = {
    "auth.test": FakeSlackApi._auth_test,
    "chat.postMessage": FakeSlackApi._chat_post_message,
    "chat.update": FakeSlackApi._chat_update,
    "chat.postEphemeral": FakeSlackApi._chat_post_ephemeral,
    "conversations.replies": FakeSlackApi._conversations_replies,
    "usergroups.users.list": FakeSlackApi._usergroups_users_list,
    "apps.connections.open": FakeSlackApi._apps_connections_open,
}
_APP_TOKEN_METHODS = frozenset({"apps.connections.open"})


async def _read_params(request: web.Request) -> tuple[JsonDict, str | None]:
    """Query string plus body, as Slack reads them; also a token sent as a form field."""
    params: JsonDict = dict(request.query)
    body_token: str | None = None
    if request.can_read_body:
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except json.JSONDecodeError:
                body = {}
            if isinstance(body, dict):
                params.update(body)
        else:  # application/x-www-form-urlencoded or multipart/form-data
            form = await request.post()
            params.update({k: v for k, v in form.items() if isinstance(v, str)})
            token = form.get("token")
            body_token = token if isinstance(token, str) else None
    for name in _JSON_ARGS:
        if isinstance(params.get(name), str):
            # Undecodable stays a string; the method then answers invalid_*_format.
            with contextlib.suppress(json.JSONDecodeError):
                params[name] = json.loads(params[name])
    # Never keep a token in the call log. A token in the URL is not accepted, as with Slack.
    params.pop("token", None)
    return params, body_token


def _text_and_blocks(params: JsonDict) -> tuple[str, list[JsonDict] | None]:
    text = params.get("text")
    blocks = params.get("blocks")
    if blocks is not None and not isinstance(blocks, list):
        raise SlackApiError("invalid_blocks_format")
    if not text and not blocks:
        raise SlackApiError("no_text")
    return str(text or ""), blocks


def _metadata(params: JsonDict) -> JsonDict | None:
    metadata = params.get("metadata")
    if metadata is None:
        return None
    if (
        not isinstance(metadata, dict)
        or not isinstance(metadata.get("event_type"), str)
        or not isinstance(metadata.get("event_payload"), dict)
    ):
        raise SlackApiError("invalid_metadata_format")
    return {"event_type": metadata["event_type"], "event_payload": metadata["event_payload"]}


def _truthy(value: Any) -> bool:
    # JSON bodies carry true/false; the SDK turns bools in query strings into "1"/"0".
    return value is True or str(value).lower() in ("1", "true")


def _int(value: Any, *, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _encode_cursor(next_ts: str) -> str:
    # Slack's own cursors look like base64("next_ts:1512085861000544").
    return base64.b64encode(f"next_ts:{next_ts.replace('.', '')}".encode()).decode()


def _decode_cursor(cursor: str) -> str:
    try:
        raw = base64.b64decode(cursor.encode(), validate=True).decode()
    except ValueError as exc:
        raise SlackApiError("invalid_cursor") from exc
    prefix, _, digits = raw.partition(":")
    if prefix != "next_ts" or not digits.isdigit() or len(digits) < 7:
        raise SlackApiError("invalid_cursor")
    return f"{digits[:-6]}.{digits[-6:]}"


# ---------------------------------------------------------------------------------------------
# The other direction: what Slack sends an app (Events API, interactivity, slash commands),
# signed with the app's signing secret the way Slack signs it.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """One request body Slack would POST to the app's Request URL."""

    body: str
    content_type: str
    payload: JsonDict  # the decoded JSON (event envelope, interaction payload or command fields)


def signed_headers(
    signing_secret: str,
    delivery: Delivery,
    *,
    timestamp: int | None = None,
    retry_num: int | None = None,
    retry_reason: str = "http_timeout",
) -> dict[str, str]:
    """Slack's v0 request signature: HMAC-SHA256 over `v0:{timestamp}:{body}`."""
    from slack_sdk.signature import SignatureVerifier

    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(signing_secret).generate_signature(
        timestamp=ts, body=delivery.body
    )
    assert signature is not None  # None only without a timestamp or a body
    headers = {
        "Content-Type": delivery.content_type,
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": signature,
    }
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = retry_reason
    return headers


class SlackSender:
    """Builds Slack's deliveries to the app, keeping the fake's channel history in step.

    A customer's post is stored in the fake (so conversations.replies finds the thread root) and
    becomes an `event_callback` envelope; clicks and shortcuts read the stored message the way
    Slack puts it into the payload.
    """

    def __init__(self, slack: FakeSlackApi, *, team_domain: str = "fake-workspace") -> None:
        self.slack = slack
        self.team_domain = team_domain

    # -- Events API ----------------------------------------------------------------------------

    def post(
        self,
        channel: str,
        text: str,
        *,
        user: str = "U0CUSTOMER",
        name: str = "nyghtowl",
        thread_ts: str | None = None,
        subtype: str | None = None,
    ) -> Delivery:
        """A person posts (a thread reply when thread_ts is set): a `message` event."""
        ts = self.slack.add_message(channel, text, user=user, thread_ts=thread_ts)
        stored = self.slack._find(channel, ts)
        assert stored is not None
        event: JsonDict = {
            "user": user,
            "type": "message",
            "ts": ts,
            "client_msg_id": stored.extra["client_msg_id"],
            "text": text,
            "team": self.slack.team_id,
            "user_team": self.slack.team_id,
            "source_team": self.slack.team_id,
            "user_profile": {
                "avatar_hash": "g0000000000",
                "image_72": "https://secure.gravatar.com/avatar/0.jpg",
                "first_name": name.title(),
                "real_name": name.title(),
                "display_name": name,
                "team": self.slack.team_id,
                "name": name,
                "is_restricted": False,
                "is_ultra_restricted": False,
            },
            "blocks": [_rich_text(text)],
            "channel": channel,
            "event_ts": ts,
            "channel_type": "channel" if channel.startswith("C") else "group",
        }
        if subtype is not None:
            event["subtype"] = subtype
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
            event["parent_user_id"] = self._root_user(channel, thread_ts)
        return self.envelope(event)

    def edit(self, channel: str, ts: str, new_text: str) -> Delivery:
        """The author edits a message: `message_changed`, a hidden event with a new ts."""
        stored = self.slack._find(channel, ts)
        assert stored is not None
        previous = self.slack._public(stored, include_metadata=False)
        stored.text = new_text
        event_ts = self.slack._next_ts()
        stored.extra["edited"] = {"user": stored.user, "ts": event_ts}
        event = {
            "type": "message",
            "subtype": "message_changed",
            "message": self.slack._public(stored, include_metadata=False),
            "previous_message": previous,
            "channel": channel,
            "hidden": True,
            "ts": event_ts,
            "event_ts": event_ts,
            "channel_type": "channel",
        }
        return self.envelope(event)

    def delete(self, channel: str, ts: str) -> Delivery:
        """The author deletes a message: `message_deleted`."""
        stored = self.slack._find(channel, ts)
        assert stored is not None
        previous = self.slack._public(stored, include_metadata=False)
        self.slack._messages[channel].remove(stored)
        event_ts = self.slack._next_ts()
        event = {
            "type": "message",
            "subtype": "message_deleted",
            "previous_message": previous,
            "channel": channel,
            "hidden": True,
            "deleted_ts": ts,
            "ts": event_ts,
            "event_ts": event_ts,
            "channel_type": "channel",
        }
        return self.envelope(event)

    def bot_post(
        self,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        legacy: bool = False,
        bot_id: str = "B0OTHERBOT",
        user: str = "U0OTHERBOT",
    ) -> Delivery:
        """Another app's bot posts: an app bot (user + bot_id) or a legacy `bot_message`."""
        ts = self.slack._next_ts()
        event: JsonDict = {"type": "message", "text": text, "ts": ts, "bot_id": bot_id}
        if legacy:
            event.update(subtype="bot_message", username="Legacy Integration")
        else:
            event.update(
                user=user,
                app_id="A0OTHERBOT",
                team=self.slack.team_id,
                blocks=[_rich_text(text)],
                bot_profile={
                    "id": bot_id,
                    "deleted": False,
                    "name": "otherbot",
                    "updated": int(time.time()),
                    "app_id": "A0OTHERBOT",
                    "icons": {},
                    "team_id": self.slack.team_id,
                },
            )
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
            event["parent_user_id"] = self._root_user(channel, thread_ts)
        event.update(channel=channel, event_ts=ts, channel_type="channel")
        return self.envelope(event)

    def join(self, channel: str, user: str = "U0NEWCOMER") -> Delivery:
        ts = self.slack._next_ts()
        return self.envelope(
            {
                "type": "message",
                "subtype": "channel_join",
                "ts": ts,
                "user": user,
                "text": f"<@{user}> has joined the channel",
                "inviter": "U0ADMIN",
                "channel": channel,
                "event_ts": ts,
                "channel_type": "channel",
            }
        )

    def envelope(self, event: JsonDict, *, event_id: str | None = None) -> Delivery:
        payload = {
            "token": "legacy-verification-token",
            "team_id": self.slack.team_id,
            "context_team_id": self.slack.team_id,
            "context_enterprise_id": None,
            "api_app_id": self.slack.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or "Ev0" + uuid.uuid4().hex[:8].upper(),
            "event_time": int(float(event["event_ts"])),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.slack.team_id,
                    "user_id": self.slack.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": "4-" + uuid.uuid4().hex,
        }
        return Delivery(json.dumps(payload), "application/json", payload)

    # -- interactivity -------------------------------------------------------------------------

    def click(
        self, channel: str, message_ts: str, action_id: str, *, user: str, name: str
    ) -> Delivery:
        """A person presses a button of a stored (bot) message: `block_actions`."""
        stored = self.slack._find(channel, message_ts)
        assert stored is not None and stored.blocks, "no message with blocks at that ts"
        element = next(
            (
                e
                for b in stored.blocks
                if b.get("type") == "actions"
                for e in b.get("elements", [])
                if e.get("action_id") == action_id
            ),
            None,
        )
        assert element is not None, f"the message has no {action_id} button (any more)"
        block_id = next(
            b.get("block_id") for b in stored.blocks if element in b.get("elements", [])
        )
        message = self.slack._public(stored, include_metadata=False)
        container: JsonDict = {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel,
            "is_ephemeral": False,
        }
        if stored.thread_ts:
            container["thread_ts"] = stored.thread_ts
        payload: JsonDict = {
            "type": "block_actions",
            "user": self._user(user, name),
            "api_app_id": self.slack.app_id,
            "token": "legacy-verification-token",
            "container": container,
            "trigger_id": self._trigger_id(),
            "team": {"id": self.slack.team_id, "domain": self.team_domain},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": channel, "name": "support"},
            "message": message,
            "state": {"values": {}},
            "response_url": self.slack.response_url("actions"),
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": block_id,
                    "text": {**element["text"], "emoji": True},
                    "value": element.get("value"),
                    **({"style": element["style"]} if "style" in element else {}),
                    "type": element["type"],
                    "action_ts": self._action_ts(),
                }
            ],
        }
        return Delivery(
            "payload=" + _quote(json.dumps(payload)), "application/x-www-form-urlencoded", payload
        )

    def shortcut(
        self, channel: str, message_ts: str, callback_id: str, *, user: str, name: str
    ) -> Delivery:
        """A message shortcut on a stored message: `message_action`."""
        stored = self.slack._find(channel, message_ts)
        assert stored is not None
        payload = {
            "type": "message_action",
            "token": "legacy-verification-token",
            "action_ts": self._action_ts(),
            "team": {"id": self.slack.team_id, "domain": self.team_domain},
            "user": self._user(user, name),
            "channel": {"id": channel, "name": "support"},
            "is_enterprise_install": False,
            "enterprise": None,
            "callback_id": callback_id,
            "trigger_id": self._trigger_id(),
            "response_url": self.slack.response_url("app"),
            "message_ts": message_ts,
            "message": self.slack._public(stored, include_metadata=False),
        }
        return Delivery(
            "payload=" + _quote(json.dumps(payload)), "application/x-www-form-urlencoded", payload
        )

    # -- slash commands ------------------------------------------------------------------------

    def command(
        self,
        command: str,
        text: str = "",
        *,
        user: str,
        name: str,
        channel: str = "C0GENERAL",
        response_url: str | None = None,
    ) -> Delivery:
        """A slash command run in `channel`: a form body, no thread in it. Its replies go to a
        hook on this fake unless `response_url` names somewhere else."""
        fields = {
            "token": "legacy-verification-token",
            "team_id": self.slack.team_id,
            "team_domain": self.team_domain,
            "channel_id": channel,
            "channel_name": "general",
            "user_id": user,
            "user_name": name,
            "command": command,
            "text": text,
            "api_app_id": self.slack.app_id,
            "is_enterprise_install": "false",
            "response_url": response_url or self.slack.response_url("commands"),
            "trigger_id": self._trigger_id(),
        }
        body = "&".join(f"{k}={_quote(v)}" for k, v in fields.items())
        return Delivery(body, "application/x-www-form-urlencoded", fields)

    def permalink(self, channel: str, ts: str) -> str:
        """What "Copy link" gives for a stored message (a reply's link names its thread)."""
        stored = self.slack._find(channel, ts)
        base = f"https://{self.team_domain}.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        if stored is not None and stored.thread_ts and stored.thread_ts != ts:
            return f"{base}?thread_ts={stored.thread_ts}&cid={channel}"
        return base

    # -- helpers -------------------------------------------------------------------------------

    def _root_user(self, channel: str, thread_ts: str) -> str:
        root = self.slack._find(channel, thread_ts)
        return root.user if root else "U0UNKNOWN"

    def _user(self, user: str, name: str) -> JsonDict:
        return {"id": user, "username": name, "name": name, "team_id": self.slack.team_id}

    def _trigger_id(self) -> str:
        return f"{uuid.uuid4().int % 10**13}.{uuid.uuid4().int % 10**13}.{uuid.uuid4().hex}"

    def _action_ts(self) -> str:
        return f"{time.time():.6f}"


def _rich_text(text: str) -> JsonDict:
    return {
        "type": "rich_text",
        "block_id": uuid.uuid4().hex[:5],
        "elements": [{"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}],
    }


def _quote(value: str) -> str:
    from urllib.parse import quote_plus

    return quote_plus(value)

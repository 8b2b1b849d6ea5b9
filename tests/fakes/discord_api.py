"""A local fake of Discord's REST API v10, for what refund-bot sends.

It answers the way Discord does, closely enough for discord.py's HTTPClient to log in, post, be rate
limited and fail the way it would against discord.com:

- `GET /users/@me`: the bot user (static_login's token check).
- `POST /channels/{channel_id}/messages`: validates like Discord (content <= 2000, nonce <= 25,
  custom_id <= 100, not empty), stores the message, and honours `nonce` + `enforce_nonce`: the same
  nonce from the same author within `nonce_window` seconds returns the existing message.
- `PATCH /channels/{channel_id}/messages/{message_id}`: edit.
- `GET /channels/{channel_id}/messages`: newest first, `limit` / `before` / `after`.

Every response carries the headers discord.py reads: `X-RateLimit-Limit`, `-Remaining`, `-Reset`,
`-Reset-After`, `-Bucket`, and `Via` (discord.py treats a 429 without `Via` as a Cloudflare ban and
does not retry it). Content-Type is exactly `application/json`, which discord.py compares literally.
Rate limits are never produced by counting: a test asks for them with `rate_limit(...)`.

`mentions` / `mention_everyone` in a stored message report who would have been pinged, after
`allowed_mentions` (absent means Discord's default: parse everything).

    async with FakeDiscordAPI() as api:
        poster = DiscordThreadPoster(SecretStr(api.token), api_url=api.api_url)
        ...
        assert len(api.messages(thread_id)) == 1
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

API_PREFIX = "/api/v10"
DISCORD_EPOCH_MS = 1420070400000
MAX_CONTENT = 2000
MAX_NONCE = 25
MAX_CUSTOM_ID = 100
MESSAGES_ROUTE = "POST /channels/{channel_id}/messages"

_USER_MENTION = re.compile(r"<@!?(\d+)>")
_ROLE_MENTION = re.compile(r"<@&(\d+)>")
_CHANNEL_ERRORS = {
    403: {"message": "Missing Access", "code": 50001},
    404: {"message": "Unknown Channel", "code": 10003},
}


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    route: str  # e.g. "POST /channels/{channel_id}/messages", "" when no route matched
    path: str  # without the /api/v10 prefix
    headers: dict[str, str]
    json: Any
    status: int


@dataclass
class _RateLimit:
    remaining: int
    retry_after: float
    is_global: bool


@dataclass
class _Channel:
    messages: list[dict[str, Any]] = field(default_factory=list)


class FakeDiscordAPI:
    """aiohttp server on 127.0.0.1 (ephemeral port) impersonating discord.com/api/v10."""

    def __init__(
        self,
        *,
        token: str = "fake-bot-token",
        bot_id: int = 1180000000000000001,
        bot_name: str = "refund-bot",
        nonce_window: float = 180.0,
    ) -> None:
        self.token = token
        self.nonce_window = nonce_window  # Discord says "the past few minutes"; exact value unknown
        self.bot_user: dict[str, Any] = _user(bot_id, bot_name, bot=True)
        self.requests: list[RecordedRequest] = []
        self._channels: dict[int, _Channel] = {}
        self._failing: dict[int, int] = {}
        self._rate_limits: dict[str, _RateLimit] = {}
        self._clock_offset = 0.0
        self._increment = itertools.count()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> FakeDiscordAPI:
        app = web.Application(middlewares=[self._middleware])
        prefix = API_PREFIX
        app.router.add_get(f"{prefix}/users/@me", self._get_me)
        app.router.add_post(f"{prefix}/channels/{{channel_id}}/messages", self._create_message)
        app.router.add_get(f"{prefix}/channels/{{channel_id}}/messages", self._list_messages)
        app.router.add_patch(
            f"{prefix}/channels/{{channel_id}}/messages/{{message_id}}", self._edit_message
        )
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]  # port 0: the OS picked a free one
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def api_url(self) -> str:
        """The base URL to give DiscordSettings.api_url / DiscordThreadPoster(api_url=...)."""
        if self._port is None:
            raise RuntimeError("FakeDiscordAPI is not started: use `async with`")
        return f"http://127.0.0.1:{self._port}{API_PREFIX}"

    # -- test controls ------------------------------------------------------------------------

    def messages(self, channel_id: int | str) -> list[dict[str, Any]]:
        """The channel's stored messages, oldest first (copies)."""
        channel = self._channels.get(int(channel_id))
        return [json.loads(json.dumps(m)) for m in channel.messages] if channel else []

    def requests_to(self, route: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.route == route]

    def rate_limit(
        self,
        route: str = MESSAGES_ROUTE,
        *,
        times: int = 1,
        retry_after: float = 0.5,
        is_global: bool = False,
    ) -> None:
        """Answer the next `times` requests to `route` (e.g. "POST /channels/{channel_id}/messages")
        with 429 and `retry_after` seconds."""
        self._rate_limits[route] = _RateLimit(times, retry_after, is_global)

    def fail_channel(self, channel_id: int | str, status: int = 403) -> None:
        """Make every request to this channel answer 403 Missing Access or 404 Unknown Channel."""
        if status not in _CHANNEL_ERRORS:
            raise ValueError(f"fail_channel supports {sorted(_CHANNEL_ERRORS)}, not {status}")
        self._failing[int(channel_id)] = status

    def advance(self, seconds: float) -> None:
        """Move Discord's clock forward, e.g. past the nonce window."""
        self._clock_offset += seconds

    def now(self) -> float:
        return time.time() + self._clock_offset

    # -- plumbing -----------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = await _json_body(request)
        resource = request.match_info.route.resource
        canonical = resource.canonical if resource is not None else ""
        route = f"{request.method} {canonical.removeprefix(API_PREFIX)}" if canonical else ""
        response = await self._dispatch(request, handler, route)
        self.requests.append(
            RecordedRequest(
                method=request.method,
                route=route,
                path=request.path.removeprefix(API_PREFIX),
                headers=dict(request.headers),
                json=body,
                status=response.status,
            )
        )
        return response

    async def _dispatch(self, request: web.Request, handler: Any, route: str) -> web.StreamResponse:
        if not route:
            return self._json({"message": "404: Not Found", "code": 0}, 404)
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return self._json({"message": "401: Unauthorized", "code": 0}, 401)
        limited = self._rate_limits.get(route)
        if limited is not None and limited.remaining > 0:
            limited.remaining -= 1
            return self._too_many(route, limited)
        channel_id = request.match_info.get("channel_id")
        if channel_id is not None and int(channel_id) in self._failing:
            status = self._failing[int(channel_id)]
            return self._json(_CHANNEL_ERRORS[status], status, route)
        return await handler(request)

    def _json(self, data: Any, status: int = 200, route: str = "") -> web.Response:
        headers = {"Content-Type": "application/json", "Via": "1.1 google"}
        if route:
            now = self.now()
            headers.update(
                {
                    "X-RateLimit-Bucket": _bucket(route),
                    "X-RateLimit-Limit": "5",
                    "X-RateLimit-Remaining": "4",
                    "X-RateLimit-Reset": f"{now + 1:.3f}",
                    "X-RateLimit-Reset-After": "1.000",
                }
            )
        return web.Response(body=json.dumps(data).encode(), status=status, headers=headers)

    def _too_many(self, route: str, limited: _RateLimit) -> web.Response:
        response = self._json(
            {
                "message": "You are being rate limited.",
                "retry_after": limited.retry_after,
                "global": limited.is_global,
                "code": 0,
            },
            429,
        )
        response.headers.update(
            {
                "Retry-After": str(math.ceil(limited.retry_after)),
                "X-RateLimit-Scope": "global" if limited.is_global else "user",
            }
        )
        if limited.is_global:
            response.headers["X-RateLimit-Global"] = "true"
        else:
            response.headers.update(
                {
                    "X-RateLimit-Bucket": _bucket(route),
                    "X-RateLimit-Limit": "5",
                    "X-RateLimit-Remaining": "0",
                    "X-RateLimit-Reset": f"{self.now() + limited.retry_after:.3f}",
                    "X-RateLimit-Reset-After": f"{limited.retry_after:.3f}",
                }
            )
        return response

    def _snowflake(self) -> int:
        ms = int(self.now() * 1000) - DISCORD_EPOCH_MS
        return (ms << 22) | (1 << 17) | (1 << 12) | (next(self._increment) % 4096)

    def _channel(self, request: web.Request) -> _Channel:
        return self._channels.setdefault(int(request.match_info["channel_id"]), _Channel())

    # -- handlers -----------------------------------------------------------------------------

    async def _get_me(self, request: web.Request) -> web.Response:
        me = {
            **self.bot_user,
            "mfa_enabled": False,
            "locale": "en-US",
            "verified": True,
            "email": None,
            "bio": "",
        }
        return self._json(me, route="GET /users/@me")

    async def _create_message(self, request: web.Request) -> web.Response:
        route = MESSAGES_ROUTE
        body = await _json_body(request)
        if not isinstance(body, dict):
            return self._json({"message": "400: Bad Request", "code": 0}, 400, route)
        errors = _validate(body)
        if errors:
            return self._json(_invalid_form(errors), 400, route)
        if not body.get("content") and not body.get("components") and not body.get("embeds"):
            return self._json(
                {"message": "Cannot send an empty message", "code": 50006}, 400, route
            )

        nonce = body.get("nonce")
        if nonce is not None and body.get("enforce_nonce"):
            existing = self._find_by_nonce(str(nonce))
            if existing is not None:
                return self._json(existing, 200, route)

        channel = self._channel(request)
        message_id = self._snowflake()
        message = {
            "type": 0,
            "content": body.get("content", ""),
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": body.get("embeds", []),
            "timestamp": _iso(_snowflake_seconds(message_id)),
            "edited_timestamp": None,
            "flags": body.get("flags", 0),
            "components": _with_component_ids(body.get("components", [])),
            "id": str(message_id),
            "channel_id": request.match_info["channel_id"],
            "author": dict(self.bot_user),
            "pinned": False,
            "mention_everyone": False,
            "tts": bool(body.get("tts", False)),
        }
        if nonce is not None:
            message["nonce"] = str(nonce)
        _apply_mentions(message, body.get("allowed_mentions"))
        channel.messages.append(message)
        return self._json(message, 200, route)

    async def _edit_message(self, request: web.Request) -> web.Response:
        route = "PATCH /channels/{channel_id}/messages/{message_id}"
        body = await _json_body(request)
        message = self._find(self._channel(request), request.match_info["message_id"])
        if message is None:
            return self._json({"message": "Unknown Message", "code": 10008}, 404, route)
        if not isinstance(body, dict):
            return self._json({"message": "400: Bad Request", "code": 0}, 400, route)
        errors = _validate(body)
        if errors:
            return self._json(_invalid_form(errors), 400, route)
        if "content" in body:
            message["content"] = body["content"] or ""
        if "components" in body:
            message["components"] = _with_component_ids(body["components"] or [])
        if "flags" in body:
            message["flags"] = body["flags"]
        message["edited_timestamp"] = _iso(self.now())
        _apply_mentions(message, body.get("allowed_mentions"))
        return self._json(message, 200, route)

    async def _list_messages(self, request: web.Request) -> web.Response:
        route = "GET /channels/{channel_id}/messages"
        try:
            limit = int(request.query.get("limit", "50"))
            before = int(request.query["before"]) if "before" in request.query else None
            after = int(request.query["after"]) if "after" in request.query else None
        except ValueError:
            return self._json(_invalid_form({"limit": "NUMBER_TYPE_COERCE"}), 400, route)
        if not 1 <= limit <= 100:
            return self._json(_invalid_form({"limit": "NUMBER_TYPE_MAX"}), 400, route)
        newest_first = list(reversed(self._channel(request).messages))
        if before is not None:
            newest_first = [m for m in newest_first if int(m["id"]) < before]
        if after is not None:
            # Discord pages `after` from the oldest side, but still returns newest first.
            newest_first = [m for m in newest_first if int(m["id"]) > after][-limit:]
        return self._json(newest_first[:limit], 200, route)

    def _find(self, channel: _Channel, message_id: str) -> dict[str, Any] | None:
        return next((m for m in channel.messages if m["id"] == message_id), None)

    def _find_by_nonce(self, nonce: str) -> dict[str, Any] | None:
        # Discord scopes enforced nonces to the author, not the channel; this fake has one author.
        oldest = self.now() - self.nonce_window
        for channel in self._channels.values():
            for message in channel.messages:
                created = _snowflake_seconds(int(message["id"]))
                if message.get("nonce") == nonce and created >= oldest:
                    return message
        return None


async def _json_body(request: web.Request) -> Any:
    # aiohttp caches the body, so the middleware and the handler can both read it.
    if not request.body_exists:
        return None
    try:
        return await request.json()
    except ValueError:
        return await request.text()


def _validate(body: dict[str, Any]) -> dict[str, str]:
    errors: dict[str, str] = {}
    content = body.get("content")
    if content is not None and len(str(content)) > MAX_CONTENT:
        errors["content"] = f"Must be {MAX_CONTENT} or fewer in length."
    nonce = body.get("nonce")
    if nonce is not None and len(str(nonce)) > MAX_NONCE:
        errors["nonce"] = f"Must be {MAX_NONCE} or fewer in length."
    for r, row in enumerate(body.get("components") or []):
        for c, component in enumerate(row.get("components", [])):
            custom_id = component.get("custom_id")
            if custom_id is not None and len(custom_id) > MAX_CUSTOM_ID:
                key = f"components.{r}.components.{c}.custom_id"
                errors[key] = f"Must be {MAX_CUSTOM_ID} or fewer in length."
    return errors


def _invalid_form(errors: dict[str, str]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for path, text in errors.items():
        node = nested
        for part in path.split("."):
            node = node.setdefault(part, {})
        node["_errors"] = [{"code": "BASE_TYPE_MAX_LENGTH", "message": text}]
    return {"message": "Invalid Form Body", "code": 50035, "errors": nested}


def _apply_mentions(message: dict[str, Any], allowed: dict[str, Any] | None) -> None:
    content = message["content"]
    parse = set((allowed or {"parse": ["users", "roles", "everyone"]}).get("parse", []))
    users = {str(u) for u in (allowed or {}).get("users", [])}
    roles = {str(r) for r in (allowed or {}).get("roles", [])}
    mentioned = dict.fromkeys(_USER_MENTION.findall(content))
    message["mentions"] = [
        _user(int(uid), f"user{uid[-4:]}") for uid in mentioned if "users" in parse or uid in users
    ]
    message["mention_roles"] = [
        rid
        for rid in dict.fromkeys(_ROLE_MENTION.findall(content))
        if "roles" in parse or rid in roles
    ]
    message["mention_everyone"] = "everyone" in parse and (
        "@everyone" in content or "@here" in content
    )


def _with_component_ids(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Discord numbers every component of a message in its response.
    ids = itertools.count(1)
    out = []
    for row in rows:
        row_out = {"type": row.get("type", 1), "id": next(ids), "components": []}
        for component in row.get("components", []):
            row_out["components"].append({**component, "id": next(ids)})
        out.append(row_out)
    return out


def _user(user_id: int, name: str, *, bot: bool = False) -> dict[str, Any]:
    user: dict[str, Any] = {
        "id": str(user_id),
        "username": name,
        "avatar": None,
        "discriminator": "4821" if bot else "0",
        "public_flags": 0,
        "flags": 0,
        "banner": None,
        "accent_color": None,
        "global_name": None if bot else name,
        "avatar_decoration_data": None,
        "banner_color": None,
    }
    if bot:
        user["bot"] = True
    return user


def _bucket(route: str) -> str:
    return hashlib.sha256(route.encode()).hexdigest()[:32]


def _snowflake_seconds(snowflake: int) -> float:
    return ((snowflake >> 22) + DISCORD_EPOCH_MS) / 1000


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="microseconds")

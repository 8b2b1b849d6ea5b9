"""A local fake of Discord's REST API v10, for what refund-bot sends.

It answers the way Discord does, closely enough for discord.py's HTTPClient to log in, post, be rate
limited and fail the way it would against discord.com:

- `GET /users/@me`: the bot user (static_login's token check).
- `POST /channels/{channel_id}/messages`: validates like Discord (content <= 2000, nonce <= 25,
  custom_id <= 100, not empty), stores the message, and honours `nonce` + `enforce_nonce`: the same
  nonce from the same author within `nonce_window` seconds returns the existing message.
- `PATCH /channels/{channel_id}/messages/{message_id}`: edit.
- `GET /channels/{channel_id}/messages`: newest first, `limit` / `before` / `after`.
- `POST /channels/{channel_id}/messages/{message_id}/threads`: a public thread on a message; like
  Discord, the thread's id is the message's id, and a second thread on one message is refused
  (400, code 160004). `fail_threads(...)` makes it fail for a while: answer 500, answer nothing
  (the request held open until the client gives up), or reset the connection.
- `GET /channels/{channel_id}`: a text channel or thread of a guild added with `add_guild`.
- `GET /oauth2/applications/@me`: the bot's application (discord.py's login reads it).
- `PUT /applications/{application_id}/commands` and `.../guilds/{guild_id}/commands`: bulk overwrite
  of application commands, validated like Discord (names, lengths, required options first).
- `GET /guilds/{guild_id}/members/{user_id}`, `GET /guilds/{guild_id}/roles`: current roles.
- `POST /interactions/{interaction_id}/{interaction_token}/callback`: the initial response to an
  interaction (types 4, 5, 6, 7), once only (40060 after that), no Authorization header (none is
  sent); `POST /webhooks/{application_id}/{interaction_token}` (followups) and
  `PATCH /webhooks/{application_id}/{interaction_token}/messages/@original`.

The gateway half: Discord also *sends* events. `guild_create_event`, `user_message`,
`message_update_event`, `message_delete_event`, `thread_create_event`, `component_interaction` and
`command_interaction` return the JSON of GUILD_CREATE, MESSAGE_CREATE, MESSAGE_UPDATE,
MESSAGE_DELETE, THREAD_CREATE and INTERACTION_CREATE as Discord would dispatch them for this fake's
state, and record what Discord would record (a user's message is stored; an interaction's token is
issued), so a test can feed them to discord.py's ConnectionState exactly as its gateway would. They
also go out over this fake's real gateway (`gateway_url`, harness.fakes.discord_gateway) to every
connected bot, as do the events Discord dispatches for what a bot did over REST: MESSAGE_CREATE
for each message it posts, THREAD_CREATE for each thread it opens.

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

import asyncio
import hashlib
import itertools
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from aiohttp import web

from harness.fakes.discord_gateway import GATEWAY_PATH, FakeDiscordGateway

API_PREFIX = "/api/v10"
DISCORD_EPOCH_MS = 1420070400000
MAX_CONTENT = 2000
MAX_NONCE = 25
MAX_CUSTOM_ID = 100
MESSAGES_ROUTE = "POST /channels/{channel_id}/messages"
THREADS_ROUTE = "POST /channels/{channel_id}/messages/{message_id}/threads"
CALLBACK_ROUTE = "POST /interactions/{interaction_id}/{interaction_token}/callback"
FOLLOWUP_ROUTE = "POST /webhooks/{application_id}/{interaction_token}"
EDIT_ORIGINAL_ROUTE = "PATCH /webhooks/{application_id}/{interaction_token}/messages/@original"
GLOBAL_COMMANDS_ROUTE = "PUT /applications/{application_id}/commands"
GUILD_COMMANDS_ROUTE = "PUT /applications/{application_id}/guilds/{guild_id}/commands"
MEMBER_ROUTE = "GET /guilds/{guild_id}/members/{user_id}"
ROLES_ROUTE = "GET /guilds/{guild_id}/roles"
EPHEMERAL = 1 << 6  # message flag
LOADING = 1 << 7  # message flag: a deferred response's "is thinking…" placeholder
ARCHIVE_DURATIONS = (60, 1440, 4320, 10080)
# Interactions carry their own token; Discord wants no bot token on these routes.
_UNAUTHENTICATED = ("POST /interactions/", "POST /webhooks/", "PATCH /webhooks/", "GET /webhooks/")
_COMMAND_NAME = re.compile(r"^[-_\w]{1,32}$")

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


# How a thread creation fails during an outage: Discord's 500, no answer at all, or a reset.
# "late": done, but answered only once the client has given up on it.
ThreadFailure = Literal[500, "hang", "reset", "late"]


@dataclass
class _Outage:
    failure: ThreadFailure
    times: int | None  # requests left to fail; None: until `until`, or until healed
    until: float | None  # time.monotonic()

    def applies(self) -> bool:
        if self.until is not None:
            return time.monotonic() < self.until
        if self.times is not None:
            self.times -= 1
            return self.times >= 0
        return True


@dataclass
class _Channel:
    messages: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Guild:
    data: dict[str, Any]  # id, name, owner_id, roles, ...
    channels: dict[int, dict[str, Any]] = field(default_factory=dict)  # text channels and threads
    members: dict[int, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Interaction:
    """An interaction Discord dispatched, and everything the bot answered to it."""

    id: int
    token: str
    type: int  # 2 application command, 3 message component
    channel_id: int
    message_id: int | None  # the message a component sits on
    acknowledged: bool = False
    callbacks: list[dict[str, Any]] = field(default_factory=list)  # initial responses' bodies
    followups: list[dict[str, Any]] = field(default_factory=list)  # messages sent as followups
    original: dict[str, Any] | None = None  # the response message of a command interaction


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
        self.bot_user: dict[str, Any] = user_object(bot_id, bot_name, bot=True)
        self.requests: list[RecordedRequest] = []
        self._channels: dict[int, _Channel] = {}
        self._failing: dict[int, int] = {}
        self._rate_limits: dict[str, _RateLimit] = {}
        self._thread_outage: _Outage | None = None
        self._unheld = asyncio.Event()  # set: held thread requests end (the client has gone)
        self.thread_attempts = 0  # thread creations asked for, answered or not
        self.thread_failures = 0  # of them, those the outage failed
        self.application: dict[str, Any] = {
            "id": str(bot_id),  # a bot made since 2019 has its application's id as its user id
            "name": bot_name,
            "icon": None,
            "description": "",
            "summary": "",
            "type": None,
            "bot_public": False,
            "bot_require_code_grant": False,
            "verify_key": hashlib.sha256(str(bot_id).encode()).hexdigest(),
            "flags": 1 << 19,  # GATEWAY_MESSAGE_CONTENT_LIMITED: the intent is switched on
            "owner": user_object(1180000000000000900, "shop-owner"),
            "team": None,
            "interactions_endpoint_url": None,
            "bot": dict(self.bot_user),
        }
        self._guilds: dict[int, _Guild] = {}
        self.commands: dict[int | None, list[dict[str, Any]]] = {}  # guild id (None: global)
        self.interactions: dict[int, Interaction] = {}
        self._clock_offset = 0.0
        self._increment = itertools.count()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self.gateway = FakeDiscordGateway(self)

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> FakeDiscordAPI:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_get(GATEWAY_PATH, self.gateway.handle)
        prefix = API_PREFIX
        app.router.add_get(f"{prefix}/users/@me", self._get_me)
        app.router.add_post(f"{prefix}/channels/{{channel_id}}/messages", self._create_message)
        app.router.add_get(f"{prefix}/channels/{{channel_id}}/messages", self._list_messages)
        app.router.add_patch(
            f"{prefix}/channels/{{channel_id}}/messages/{{message_id}}", self._edit_message
        )
        app.router.add_post(
            f"{prefix}/channels/{{channel_id}}/messages/{{message_id}}/threads", self._start_thread
        )
        app.router.add_get(f"{prefix}/channels/{{channel_id}}", self._get_channel)
        app.router.add_get(f"{prefix}/oauth2/applications/@me", self._get_application)
        app.router.add_put(f"{prefix}/applications/{{application_id}}/commands", self._put_commands)
        app.router.add_put(
            f"{prefix}/applications/{{application_id}}/guilds/{{guild_id}}/commands",
            self._put_commands,
        )
        app.router.add_get(f"{prefix}/guilds/{{guild_id}}/members/{{user_id}}", self._get_member)
        app.router.add_get(f"{prefix}/guilds/{{guild_id}}/roles", self._get_roles)
        app.router.add_post(
            f"{prefix}/interactions/{{interaction_id}}/{{interaction_token}}/callback",
            self._interaction_callback,
        )
        app.router.add_post(
            f"{prefix}/webhooks/{{application_id}}/{{interaction_token}}", self._followup
        )
        app.router.add_patch(
            f"{prefix}/webhooks/{{application_id}}/{{interaction_token}}/messages/@original",
            self._edit_original,
        )
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]  # port 0: the OS picked a free one
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # Close the gateway's websockets first: the server waits for open handlers on shutdown.
        await self.gateway.close_connections(1001)
        self._unheld.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def api_url(self) -> str:
        """The base URL to give DiscordSettings.api_url / DiscordThreadPoster(api_url=...)."""
        if self._port is None:
            raise RuntimeError("FakeDiscordAPI is not started: use `async with`")
        return f"http://127.0.0.1:{self._port}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        """The websocket URL to give DiscordSettings.gateway_url (DISCORD_GATEWAY_URL)."""
        if self._port is None:
            raise RuntimeError("FakeDiscordAPI is not started: use `async with`")
        return f"ws://127.0.0.1:{self._port}{GATEWAY_PATH}"

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

    def fail_threads(
        self,
        failure: ThreadFailure = 500,
        *,
        times: int | None = None,
        seconds: float | None = None,
    ) -> None:
        """Fail thread creation for the next `times` requests, or for `seconds` from now, or until
        `heal_threads()`: with 500 Internal Server Error (which discord.py retries itself, up to
        five requests in 25 s), with no answer ("hang": the request is held, never done, its
        connection open until the client gives up), or by closing the connection ("reset")."""
        self._thread_outage = _Outage(
            failure, times, time.monotonic() + seconds if seconds is not None else None
        )
        self._unheld.clear()

    def heal_threads(self) -> None:
        """Thread creation works again; requests still held end unanswered."""
        self._thread_outage = None
        self._unheld.set()

    def advance(self, seconds: float) -> None:
        """Move Discord's clock forward, e.g. past the nonce window."""
        self._clock_offset += seconds

    def now(self) -> float:
        return time.time() + self._clock_offset

    # -- guilds, members and roles (what a server admin sets up in Discord's client) -----------

    def add_guild(
        self, guild_id: int, *, name: str = "Nyghtowl Shop", owner_id: int = 1180000000000000900
    ) -> None:
        everyone = _role(guild_id, "@everyone", position=0)
        self._guilds[guild_id] = _Guild(
            data={"id": str(guild_id), "name": name, "owner_id": str(owner_id), "roles": [everyone]}
        )
        self.add_member(guild_id, self.bot_user)

    def guild_ids(self) -> list[int]:
        return list(self._guilds)

    def add_text_channel(self, guild_id: int, channel_id: int, name: str) -> None:
        guild = self._guilds[guild_id]
        guild.channels[channel_id] = {
            "id": str(channel_id),
            "type": 0,
            "guild_id": str(guild_id),
            "name": name,
            "position": len(guild.channels),
            "permission_overwrites": [],
            "parent_id": None,
            "nsfw": False,
            "topic": None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "default_auto_archive_duration": 1440,
            "flags": 0,
        }

    def add_role(self, guild_id: int, role_id: int, name: str) -> None:
        roles = self._guilds[guild_id].data["roles"]
        roles.append(_role(role_id, name, position=len(roles)))

    def add_member(
        self,
        guild_id: int,
        user: dict[str, Any],
        roles: tuple[int, ...] = (),
        nick: str | None = None,
    ) -> dict[str, Any]:
        member = {
            "user": dict(user),
            "nick": nick,
            "avatar": None,
            "banner": None,
            "roles": [str(r) for r in roles],
            "joined_at": _iso(self.now() - 86400),
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "flags": 0,
            "pending": False,
            "communication_disabled_until": None,
            "avatar_decoration_data": None,
        }
        self._guilds[guild_id].members[int(user["id"])] = member
        return member

    def set_member_roles(self, guild_id: int, user_id: int, roles: tuple[int, ...]) -> None:
        self._guilds[guild_id].members[user_id]["roles"] = [str(r) for r in roles]

    def remove_member(self, guild_id: int, user_id: int) -> None:
        del self._guilds[guild_id].members[user_id]

    def channel(self, channel_id: int | str) -> dict[str, Any] | None:
        """A text channel or thread as Discord describes it (a copy), or None."""
        found = self._guild_channel(int(channel_id))
        return json.loads(json.dumps(found[1])) if found else None

    def message(self, channel_id: int | str, message_id: int | str) -> dict[str, Any] | None:
        return next((m for m in self.messages(channel_id) if m["id"] == str(message_id)), None)

    # -- plumbing -----------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == GATEWAY_PATH:
            return await handler(request)  # the websocket: no REST rules, recorded on its own
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
        if not route.startswith(_UNAUTHENTICATED) and (
            request.headers.get("Authorization") != f"Bot {self.token}"
        ):
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

    async def _message_body(
        self, request: web.Request, route: str
    ) -> dict[str, Any] | web.Response:
        """A message payload as Discord checks it: a JSON object within its limits, or the 400
        Discord would answer."""
        body = await _json_body(request)
        if not isinstance(body, dict):
            return self._json({"message": "400: Bad Request", "code": 0}, 400, route)
        errors = _validate(body)
        if errors:
            return self._json(_invalid_form(errors), 400, route)
        return body

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
        body = await self._message_body(request, route)
        if isinstance(body, web.Response):
            return body
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
        reference = body.get("message_reference")
        if isinstance(reference, dict):  # a reply
            message["type"] = 19
            message["message_reference"] = {
                "type": 0,
                "message_id": str(reference["message_id"]),
                "channel_id": request.match_info["channel_id"],
            }
        _apply_mentions(message, body.get("allowed_mentions"))
        channel.messages.append(message)
        self._dispatch_bot_message(message)
        return self._json(message, 200, route)

    async def _edit_message(self, request: web.Request) -> web.Response:
        route = "PATCH /channels/{channel_id}/messages/{message_id}"
        message = self._find(self._channel(request), request.match_info["message_id"])
        if message is None:
            return self._json({"message": "Unknown Message", "code": 10008}, 404, route)
        body = await self._message_body(request, route)
        if isinstance(body, web.Response):
            return body
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

    def _dispatch_bot_message(self, message: dict[str, Any]) -> None:
        """MESSAGE_CREATE for a message the bot posted over REST, as Discord sends it back."""
        found = self._guild_channel(int(message["channel_id"]))
        if found is None:
            return
        guild, _ = found
        event = {**json.loads(json.dumps(message)), "guild_id": guild.data["id"]}
        bot_member = guild.members.get(int(self.bot_user["id"]))
        if bot_member is not None:
            event["member"] = _partial_member(bot_member)
        self.gateway.dispatch("MESSAGE_CREATE", event)

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

    def _guild_channel(self, channel_id: int) -> tuple[_Guild, dict[str, Any]] | None:
        for guild in self._guilds.values():
            if channel_id in guild.channels:
                return guild, guild.channels[channel_id]
        return None

    async def _start_thread(self, request: web.Request) -> web.Response:
        """A thread on a message, unless the outage `fail_threads` set up fails it."""
        self.thread_attempts += 1
        outage = self._thread_outage
        failure = outage.failure if outage is not None and outage.applies() else None
        if failure is not None:
            self.thread_failures += 1
        if failure == "late":
            answer = await self._open_thread(request)
            await self._unheld.wait()  # by now the client has given up on it
            return answer
        if failure == "hang":
            await self._unheld.wait()
        elif failure == "reset" and request.transport is not None:
            request.transport.close()
        if failure is not None:
            # No rate-limit headers: Discord's own 500 page comes from its edge, not the API.
            return web.Response(
                body=b'{"message": "500: Internal Server Error", "code": 0}',
                status=500,
                headers={"Content-Type": "application/json", "Via": "1.1 google"},
            )
        return await self._open_thread(request)

    async def _open_thread(self, request: web.Request) -> web.Response:
        route = THREADS_ROUTE
        channel_id = int(request.match_info["channel_id"])
        found = self._guild_channel(channel_id)
        if found is None or found[1]["type"] != 0:
            return self._json({"message": "Unknown Channel", "code": 10003}, 404, route)
        guild, parent = found
        message = self._find(self._channel(request), request.match_info["message_id"])
        if message is None:
            return self._json({"message": "Unknown Message", "code": 10008}, 404, route)
        body = await _json_body(request)
        if not isinstance(body, dict):
            return self._json({"message": "400: Bad Request", "code": 0}, 400, route)
        errors: dict[str, str] = {}
        if not 1 <= len(str(body.get("name", ""))) <= 100:
            errors["name"] = "Must be between 1 and 100 in length."
        archive = body.get("auto_archive_duration", parent["default_auto_archive_duration"])
        if archive not in ARCHIVE_DURATIONS:
            errors["auto_archive_duration"] = f"Value must be one of {ARCHIVE_DURATIONS}."
        if errors:
            return self._json(_invalid_form(errors), 400, route)
        # A thread started from a message takes the message's id: one thread per message.
        thread_id = int(message["id"])
        if thread_id in guild.channels:
            return self._json(
                {"message": "A thread has already been created for this message", "code": 160004},
                400,
                route,
            )
        now = _iso(self.now())
        thread = {
            "id": str(thread_id),
            "type": 11,
            "guild_id": guild.data["id"],
            "parent_id": str(channel_id),
            "owner_id": self.bot_user["id"],
            "name": str(body["name"]),
            "last_message_id": None,
            "rate_limit_per_user": int(body.get("rate_limit_per_user") or 0),
            "flags": 0,
            "message_count": 0,
            "member_count": 1,
            "total_message_sent": 0,
            "thread_metadata": {
                "archived": False,
                "archive_timestamp": now,
                "auto_archive_duration": archive,
                "locked": False,
                "create_timestamp": now,
            },
            "member": {
                "id": str(thread_id),
                "user_id": self.bot_user["id"],
                "join_timestamp": now,
                "flags": 1,
                "muted": False,
                "mute_config": None,
            },
        }
        guild.channels[thread_id] = thread
        message["thread"] = thread
        self.gateway.dispatch("THREAD_CREATE", self.thread_create_event(thread_id))
        return self._json(thread, 201, route)

    async def _get_channel(self, request: web.Request) -> web.Response:
        route = "GET /channels/{channel_id}"
        found = self._guild_channel(int(request.match_info["channel_id"]))
        if found is None:
            return self._json({"message": "Unknown Channel", "code": 10003}, 404, route)
        return self._json(found[1], 200, route)

    async def _get_application(self, request: web.Request) -> web.Response:
        return self._json(self.application, 200, "GET /oauth2/applications/@me")

    async def _put_commands(self, request: web.Request) -> web.Response:
        guild_id = request.match_info.get("guild_id")
        route = GUILD_COMMANDS_ROUTE if guild_id else GLOBAL_COMMANDS_ROUTE
        if request.match_info["application_id"] != self.application["id"]:
            return self._json({"message": "Missing Access", "code": 50001}, 403, route)
        if guild_id is not None and int(guild_id) not in self._guilds:
            return self._json({"message": "Missing Access", "code": 50001}, 403, route)
        body = await _json_body(request)
        if not isinstance(body, list):
            return self._json({"message": "400: Bad Request", "code": 0}, 400, route)
        errors = _validate_commands(body)
        if errors:
            return self._json(_invalid_form(errors), 400, route)
        stored = []
        for command in body:
            out = {
                "id": str(self._snowflake()),
                "application_id": self.application["id"],
                "version": str(self._snowflake()),
                "type": command.get("type", 1),
                "name": command["name"],
                "description": command.get("description", ""),
                "options": command.get("options", []),
                "default_member_permissions": command.get("default_member_permissions"),
                "nsfw": command.get("nsfw", False),
                "contexts": command.get("contexts"),
                "integration_types": command.get("integration_types", [0]),
            }
            if guild_id is not None:
                out["guild_id"] = guild_id
            stored.append(out)
        self.commands[int(guild_id) if guild_id else None] = stored
        return self._json(stored, 200, route)

    async def _get_member(self, request: web.Request) -> web.Response:
        route = MEMBER_ROUTE
        guild = self._guilds.get(int(request.match_info["guild_id"]))
        if guild is None:
            return self._json({"message": "Unknown Guild", "code": 10004}, 404, route)
        member = guild.members.get(int(request.match_info["user_id"]))
        if member is None:
            return self._json({"message": "Unknown Member", "code": 10007}, 404, route)
        return self._json(member, 200, route)

    async def _get_roles(self, request: web.Request) -> web.Response:
        guild = self._guilds.get(int(request.match_info["guild_id"]))
        if guild is None:
            return self._json({"message": "Unknown Guild", "code": 10004}, 404, ROLES_ROUTE)
        return self._json(guild.data["roles"], 200, ROLES_ROUTE)

    def _interaction(self, request: web.Request) -> Interaction | None:
        token = request.match_info["interaction_token"]
        if "interaction_id" in request.match_info:
            found = self.interactions.get(int(request.match_info["interaction_id"]))
        else:
            found = next((i for i in self.interactions.values() if i.token == token), None)
            if request.match_info["application_id"] != self.application["id"]:
                found = None
        return found if found is not None and found.token == token else None

    async def _interaction_callback(self, request: web.Request) -> web.Response:
        route = CALLBACK_ROUTE
        interaction = self._interaction(request)
        if interaction is None:
            return self._json({"message": "Unknown interaction", "code": 10062}, 404, route)
        if interaction.acknowledged:
            return self._json(
                {"message": "Interaction has already been acknowledged.", "code": 40060},
                400,
                route,
            )
        body = await _json_body(request)
        if not isinstance(body, dict) or body.get("type") not in (4, 5, 6, 7):
            return self._json(_invalid_form({"type": "Value must be one of (4, 5, 6, 7)."}), 400)
        kind: int = body["type"]
        data = body.get("data") or {}
        if kind in (6, 7) and interaction.message_id is None:
            # Only a component's interaction has a message to update.
            errors = {"type": "Interaction has no message to update."}
            return self._json(_invalid_form(errors), 400, route)
        errors = _validate(data)
        if errors:
            return self._json(
                _invalid_form({f"data.{k}": v for k, v in errors.items()}), 400, route
            )
        interaction.acknowledged = True
        interaction.callbacks.append(body)

        message: dict[str, Any] | None = None
        if kind == 4:
            message = self._response_message(interaction, data)
            interaction.original = message
        elif kind == 5:
            message = self._response_message(
                interaction, {"flags": (data.get("flags") or 0) | LOADING}
            )
            interaction.original = message
        elif kind == 7:
            message = self._edit_stored(interaction, data)
        response = {
            "interaction": {
                "id": str(interaction.id),
                "type": interaction.type,
                "response_message_loading": kind == 5,
                "response_message_ephemeral": bool(message and message["flags"] & EPHEMERAL),
            },
        }
        if message is not None:
            response["interaction"]["response_message_id"] = message["id"]
            response["resource"] = {"type": kind, "message": message}
        if request.query.get("with_response") not in ("1", "true", "True"):
            return web.Response(status=204, headers={"Via": "1.1 google"})
        return self._json(response, 200, route)

    async def _followup(self, request: web.Request) -> web.Response:
        route = FOLLOWUP_ROUTE
        interaction = self._interaction(request)
        if interaction is None or not interaction.acknowledged:
            # Before the first response, the interaction's webhook does not exist yet.
            return self._json({"message": "Unknown Webhook", "code": 10015}, 404, route)
        body = await self._message_body(request, route)
        if isinstance(body, web.Response):
            return body
        message = self._response_message(interaction, body)
        interaction.followups.append(message)
        return self._json(message, 200, route)

    async def _edit_original(self, request: web.Request) -> web.Response:
        route = EDIT_ORIGINAL_ROUTE
        interaction = self._interaction(request)
        if interaction is None or not interaction.acknowledged:
            return self._json({"message": "Unknown Webhook", "code": 10015}, 404, route)
        body = await self._message_body(request, route)
        if isinstance(body, web.Response):
            return body
        if interaction.original is None:
            # A component interaction's original is the message the component sits on.
            return self._json(self._edit_stored(interaction, body), 200, route)
        _apply_edit(interaction.original, body, self.now())
        interaction.original["flags"] &= ~LOADING
        return self._json(interaction.original, 200, route)

    def _response_message(self, interaction: Interaction, data: dict[str, Any]) -> dict[str, Any]:
        message_id = self._snowflake()
        message = {
            "type": 20 if interaction.type == 2 else 19,  # CHAT_INPUT_COMMAND / REPLY
            "content": data.get("content", ""),
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": data.get("embeds", []),
            "timestamp": _iso(_snowflake_seconds(message_id)),
            "edited_timestamp": None,
            "flags": data.get("flags") or 0,
            "components": _with_component_ids(data.get("components") or []),
            "id": str(message_id),
            "channel_id": str(interaction.channel_id),
            "author": dict(self.bot_user),
            "pinned": False,
            "mention_everyone": False,
            "tts": False,
            "webhook_id": self.application["id"],
            "application_id": self.application["id"],
        }
        _apply_mentions(message, data.get("allowed_mentions"))
        if not message["flags"] & EPHEMERAL:
            self._channels.setdefault(interaction.channel_id, _Channel()).messages.append(message)
        return message

    def _edit_stored(self, interaction: Interaction, data: dict[str, Any]) -> dict[str, Any]:
        channel = self._channels.setdefault(interaction.channel_id, _Channel())
        message = self._find(channel, str(interaction.message_id))
        if message is None:
            raise web.HTTPNotFound(
                text=json.dumps({"message": "Unknown Message", "code": 10008}),
                content_type="application/json",
            )
        _apply_edit(message, data, self.now())
        return message

    # -- the gateway: events as Discord dispatches them ------------------------------------------

    def guild_create_event(self, guild_id: int) -> dict[str, Any]:
        """GUILD_CREATE for the bot: channels, roles, the bot's own member and active threads."""
        guild = self._guilds[guild_id]
        channels = [c for c in guild.channels.values() if c["type"] != 11]
        threads = [
            c
            for c in guild.channels.values()
            if c["type"] == 11 and not c["thread_metadata"]["archived"]
        ]
        bot_member = guild.members[int(self.bot_user["id"])]
        return {
            **guild.data,
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 1,
            "default_message_notifications": 1,
            "explicit_content_filter": 2,
            "emojis": [],
            "stickers": [],
            "features": [],
            "mfa_level": 0,
            "system_channel_id": None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "vanity_url_code": None,
            "description": None,
            "banner": None,
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "public_updates_channel_id": None,
            "nsfw_level": 0,
            "premium_progress_bar_enabled": False,
            "joined_at": bot_member["joined_at"],
            "large": False,
            "unavailable": False,
            "member_count": len(guild.members),
            "voice_states": [],
            "members": [bot_member],
            "channels": [{k: v for k, v in c.items() if k != "guild_id"} for c in channels],
            "threads": threads,
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }

    def user_message(
        self,
        channel_id: int,
        author_id: int,
        content: str,
        *,
        bot: bool = False,
    ) -> dict[str, Any]:
        """A member posts `content` in a channel or thread: stores it and returns MESSAGE_CREATE.

        `bot=True` posts as another bot (or, with the bot's own id, as this bot from elsewhere).
        """
        guild, channel = self._require_channel(channel_id)
        member = guild.members[author_id]
        message_id = self._snowflake()
        author = dict(member["user"])
        if bot:
            author["bot"] = True
        message = {
            "type": 0,
            "content": content,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "timestamp": _iso(_snowflake_seconds(message_id)),
            "edited_timestamp": None,
            "flags": 0,
            "components": [],
            "id": str(message_id),
            "channel_id": str(channel_id),
            "author": author,
            "pinned": False,
            "mention_everyone": False,
            "tts": False,
            "nonce": str(message_id - 1),  # the client's nonce; not enforced
        }
        _apply_mentions(message, None)
        self._channels.setdefault(channel_id, _Channel()).messages.append(message)
        if channel["type"] == 11:
            channel["message_count"] += 1
            channel["total_message_sent"] += 1
            channel["last_message_id"] = str(message_id)
        event = {**message, "guild_id": guild.data["id"], "member": _partial_member(member)}
        self.gateway.dispatch("MESSAGE_CREATE", event)
        return event

    def message_update_event(
        self, channel_id: int, message_id: int | str, content: str
    ) -> dict[str, Any]:
        """The author edits a message: MESSAGE_UPDATE (the full message, as Discord sends now)."""
        guild, _ = self._require_channel(channel_id)
        message = self._find(self._channels[channel_id], str(message_id))
        assert message is not None, f"no message {message_id} in {channel_id}"
        message["content"] = content
        message["edited_timestamp"] = _iso(self.now())
        member = guild.members.get(int(message["author"]["id"]))
        event = {**json.loads(json.dumps(message)), "guild_id": guild.data["id"]}
        if member is not None:
            event["member"] = _partial_member(member)
        self.gateway.dispatch("MESSAGE_UPDATE", event)
        return event

    def message_delete_event(self, channel_id: int, message_id: int | str) -> dict[str, Any]:
        guild, _ = self._require_channel(channel_id)
        channel = self._channels[channel_id]
        channel.messages = [m for m in channel.messages if m["id"] != str(message_id)]
        event = {"id": str(message_id), "channel_id": str(channel_id), "guild_id": guild.data["id"]}
        self.gateway.dispatch("MESSAGE_DELETE", event)
        return event

    def thread_create_event(self, thread_id: int) -> dict[str, Any]:
        """THREAD_CREATE Discord sends the bot after the bot created the thread."""
        _, thread = self._require_channel(thread_id)
        return {**json.loads(json.dumps(thread)), "newly_created": True}

    def component_interaction(
        self, channel_id: int, message_id: int | str, user_id: int, custom_id: str
    ) -> dict[str, Any]:
        """A member clicks the button `custom_id` on a stored message: INTERACTION_CREATE type 3."""
        message = self._find(self._channels[channel_id], str(message_id))
        assert message is not None, f"no message {message_id} in {channel_id}"
        buttons = [c for row in message["components"] for c in row.get("components", [])]
        button = next((b for b in buttons if b.get("custom_id") == custom_id), None)
        assert button is not None, f"message {message_id} has no button {custom_id!r}"
        data = {"custom_id": custom_id, "component_type": button["type"], "id": button["id"]}
        return self._new_interaction(3, channel_id, user_id, data, message)

    def command_interaction(
        self,
        name: str,
        channel_id: int,
        user_id: int,
        options: Mapping[str, str | int | bool] | None = None,
    ) -> dict[str, Any]:
        """A member runs a registered slash command: INTERACTION_CREATE type 2.

        USER options take a user id; their user (and member, when in the guild) is resolved.
        """
        guild, _ = self._require_channel(channel_id)
        guild_id = int(guild.data["id"])
        registered = self.commands.get(guild_id) or self.commands.get(None) or []
        command = next((c for c in registered if c["name"] == name), None)
        assert command is not None, f"/{name} is not registered with Discord"
        data: dict[str, Any] = {"id": command["id"], "name": name, "type": 1}
        if "guild_id" in command:
            data["guild_id"] = command["guild_id"]
        resolved: dict[str, dict[str, Any]] = {}
        given = []
        for option in command["options"]:
            if option["name"] not in (options or {}):
                continue
            value = (options or {})[option["name"]]
            given.append(
                {
                    "name": option["name"],
                    "type": option["type"],
                    "value": str(value) if option["type"] == 6 else value,
                }
            )
            if option["type"] == 6:
                member = guild.members.get(int(value))
                user = (
                    member["user"] if member else user_object(int(value), f"user{str(value)[-4:]}")
                )
                resolved.setdefault("users", {})[str(value)] = user
                if member:
                    partial = {
                        k: v
                        for k, v in _partial_member(member).items()
                        if k != "deaf" and k != "mute"
                    }
                    resolved.setdefault("members", {})[str(value)] = {**partial, "permissions": "0"}
        unknown = set(options or {}) - {o["name"] for o in command["options"]}
        assert not unknown, f"/{name} has no options {sorted(unknown)}"
        if given:
            data["options"] = given
        if resolved:
            data["resolved"] = resolved
        return self._new_interaction(2, channel_id, user_id, data, None)

    def _require_channel(self, channel_id: int) -> tuple[_Guild, dict[str, Any]]:
        found = self._guild_channel(channel_id)
        assert found is not None, f"channel {channel_id} is in no guild of this fake"
        return found

    def _new_interaction(
        self,
        kind: int,
        channel_id: int,
        user_id: int,
        data: dict[str, Any],
        message: dict[str, Any] | None,
    ) -> dict[str, Any]:
        guild, channel = self._require_channel(channel_id)
        interaction_id = self._snowflake()
        token = "aW50ZXJhY3Rpb246" + hashlib.sha256(str(interaction_id).encode()).hexdigest()
        self.interactions[interaction_id] = Interaction(
            id=interaction_id,
            token=token,
            type=kind,
            channel_id=channel_id,
            message_id=int(message["id"]) if message else None,
        )
        member = guild.members[user_id]
        payload: dict[str, Any] = {
            "id": str(interaction_id),
            "application_id": self.application["id"],
            "type": kind,
            "data": data,
            "guild": {"id": guild.data["id"], "locale": "en-US", "features": []},
            "guild_id": guild.data["id"],
            "channel": json.loads(json.dumps(channel)),
            "channel_id": str(channel_id),
            "member": {**member, "permissions": "2248473465835073"},
            "token": token,
            "version": 1,
            "app_permissions": "2248473465835073",
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": guild.data["id"]},
            "context": 0,
            "attachment_size_limit": 10485760,
        }
        if message is not None:
            payload["message"] = json.loads(json.dumps(message))
        self.gateway.dispatch("INTERACTION_CREATE", payload)
        return payload


async def _json_body(request: web.Request) -> Any:
    # aiohttp caches the body, so the middleware and the handler can both read it.
    if not request.body_exists:
        return None
    try:
        return await request.json()
    except ValueError:
        return await request.text()


def _validate_commands(commands: list[Any]) -> dict[str, str]:
    errors: dict[str, str] = {}
    for i, command in enumerate(commands):
        if not isinstance(command, dict):
            errors[str(i)] = "Must be an object."
            continue
        name = str(command.get("name", ""))
        if not _COMMAND_NAME.match(name) or name != name.lower():
            errors[f"{i}.name"] = "Command name is invalid"
        if command.get("type", 1) == 1 and not 1 <= len(command.get("description", "")) <= 100:
            errors[f"{i}.description"] = "Must be between 1 and 100 in length."
        optional_seen = False
        for j, option in enumerate(command.get("options", [])):
            if not _COMMAND_NAME.match(str(option.get("name", ""))):
                errors[f"{i}.options.{j}.name"] = "Command name is invalid"
            if not 1 <= len(option.get("description", "")) <= 100:
                errors[f"{i}.options.{j}.description"] = "Must be between 1 and 100 in length."
            if option.get("type") not in range(1, 12):
                errors[f"{i}.options.{j}.type"] = "Value is not a valid enum value."
            if option.get("required"):
                if optional_seen:
                    errors[f"{i}.options"] = (
                        "Required options must be placed before non-required options"
                    )
            else:
                optional_seen = True
    names = [c.get("name") for c in commands if isinstance(c, dict)]
    if len(names) != len(set(names)):
        errors["_"] = "Application command names must be unique"
    return errors


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
        user_object(int(uid), f"user{uid[-4:]}")
        for uid in mentioned
        if "users" in parse or uid in users
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


def _apply_edit(message: dict[str, Any], body: dict[str, Any], now: float) -> None:
    if "content" in body:
        message["content"] = body["content"] or ""
    if "components" in body:
        message["components"] = _with_component_ids(body["components"] or [])
    if "embeds" in body:
        message["embeds"] = body["embeds"] or []
    message["edited_timestamp"] = _iso(now)
    _apply_mentions(message, body.get("allowed_mentions"))


def _partial_member(member: dict[str, Any]) -> dict[str, Any]:
    # MESSAGE_CREATE carries the author's member without its user (the user is `author`).
    return {k: v for k, v in member.items() if k != "user"}


def _role(role_id: int, name: str, *, position: int) -> dict[str, Any]:
    return {
        "id": str(role_id),
        "name": name,
        "color": 0,
        "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
        "hoist": False,
        "icon": None,
        "unicode_emoji": None,
        "position": position,
        "permissions": "2248473465835073" if name == "@everyone" else "0",
        "managed": False,
        "mentionable": False,
        "flags": 0,
    }


def user_object(user_id: int, name: str, *, bot: bool = False) -> dict[str, Any]:
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

"""DiscordThreadPoster: the Worker's post_to_thread and edit_thread_message for Discord, by REST.

No gateway connection: the Worker only creates and edits messages, so it logs in with
`HTTPClient.static_login` (one GET /users/@me) and posts with discord.py's own HTTPClient, which
keeps its rate-limit handling: it waits out a 429's `retry_after` and the bucket headers.

Idempotency: every post carries a nonce derived from the message key, with `enforce_nonce: true`,
so a retried Activity sending the same key gets Discord's earlier message back instead of a second
one. Discord remembers a nonce only for "a few minutes" (same author); a retry later than that
posts again, so the Activity's retry policy should stop well inside that window.

`api_url` (DiscordSettings.api_url: a proxy, or harness.fakes.discord_api): discord.py builds every
URL from the class attribute `Route.BASE`, including the GET /users/@me inside static_login, which
we cannot hand a Route of our own. Rather than assign `Route.BASE` (process-wide: it would also
move a gateway bot in the same process), `RoutedHTTPClient` rewrites the base of each Route it
sends, in its own `request`. Bucket keys do not depend on the URL, so rate limiting is unchanged.
A proxy or fake must answer like Discord, including the `Via` header discord.py requires on a 429.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import discord
from discord.http import HTTPClient, MultipartParameters, Route
from pydantic import SecretStr
from temporalio.exceptions import ApplicationError

from agent.models import MessageEdit, MessageKey, OutboundMessage, PostedMessage
from bot.discord.render import edit_payload_for, is_role_id, payload_for
from bot.discord.settings import DiscordSettings

log = logging.getLogger(__name__)

PERMANENT_ERROR = "DiscordPermanentError"
AUTH_ERROR = "DiscordAuthError"
RATE_LIMITED = "DiscordRateLimited"

# A returned message created this long before the call started was not created by this call.
# Allows for the Worker's clock running ahead of Discord's; NTP keeps hosts well inside it.
CLOCK_SKEW = timedelta(seconds=1)
# Longest 429 wait sat out inside the Activity; a longer one becomes a retryable error whose
# next_retry_delay hands the wait to Temporal. discord.py enforces a floor of 30 s.
DEFAULT_MAX_RATELIMIT_WAIT = 30.0
_REMEMBERED_POSTS = 1024


def _utcnow() -> datetime:
    return datetime.now(UTC)


class RoutedHTTPClient(HTTPClient):
    """discord.py's HTTPClient, sending every Route to `base_url` instead of `Route.BASE`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        base_url: str | None,
        max_ratelimit_timeout: float | None,
    ) -> None:
        super().__init__(loop, max_ratelimit_timeout=max_ratelimit_timeout)
        self._base_url = base_url

    async def request(self, route: Route, **kwargs: Any) -> Any:
        if self._base_url is not None and route.url.startswith(Route.BASE):
            route.url = self._base_url + route.url[len(Route.BASE) :]
        return await super().request(route, **kwargs)


class DiscordThreadPoster:
    """Implements agent.activities.notify.ThreadPoster for Discord threads.

    `message.thread.thread` is the thread's channel id. Returns PostedMessage(duplicate=True) when
    the message already existed: either this poster posted that key before (same process), or the
    returned message is older than this call (an earlier attempt, perhaps another Worker). It is a
    report, not the guarantee: the guarantee is the enforced nonce, and a retry racing an earlier
    attempt by less than CLOCK_SKEW may report duplicate=False for an existing message.
    """

    def __init__(
        self,
        token: SecretStr,
        *,
        api_url: str | None = None,
        max_ratelimit_wait: float = DEFAULT_MAX_RATELIMIT_WAIT,
        now: Callable[[], datetime] = _utcnow,
        approver_role: str | None = None,
    ) -> None:
        """`approver_role`: DISCORD_APPROVER_ROLE, which the approvers' reminder mentions."""
        if not token.get_secret_value():
            raise ValueError("DiscordThreadPoster needs a bot token")
        self._token = token
        self._api_url = api_url.rstrip("/") if api_url else None
        self._max_ratelimit_wait = max_ratelimit_wait
        self._now = now
        self._approver_role = approver_role
        self._http: HTTPClient | None = None
        self._login_lock = asyncio.Lock()
        self._posted: OrderedDict[str, str] = OrderedDict()  # nonce -> message id, bounded

    @classmethod
    def from_settings(cls, settings: DiscordSettings) -> DiscordThreadPoster:
        if settings.token is None:
            raise ValueError("DISCORD_TOKEN is not set: Discord is not configured")
        return cls(settings.token, api_url=settings.api_url, approver_role=settings.approver_role)

    async def post(self, message: OutboundMessage) -> PostedMessage:
        channel_id = _thread_channel_id(message.thread.platform, message.thread.thread, message.key)
        named = await self._roles_named(message)
        try:
            payload = payload_for(message, self._approver_role, named)
        except ValueError as exc:
            _permanent(f"cannot render message {message.key} for Discord: {exc}", exc)
        nonce: str = payload["nonce"]

        started = self._now()
        data = await self._request(
            channel_id,
            lambda http: http.send_message(
                channel_id, params=MultipartParameters(payload=payload, multipart=None, files=None)
            ),
        )
        message_id = str(data["id"])
        created = discord.utils.snowflake_time(int(message_id))
        duplicate = self._posted.get(nonce) == message_id or created < started - CLOCK_SKEW
        self._remember(nonce, message_id)
        log.info(
            "discord post %s to thread %s: message %s%s",
            message.key,
            channel_id,
            message_id,
            " (already posted)" if duplicate else "",
        )
        return PostedMessage(platform_message_id=message_id, duplicate=duplicate)

    async def _roles_named(self, message: OutboundMessage) -> list[str]:
        """For the approvers' reminder, when DISCORD_APPROVER_ROLE is a name: the ids of the
        thread's guild's roles of that name, read now (a renamed role stops matching at once, as
        in bot.discord.grants). [] otherwise, and when the roles cannot be read: the reminder then
        writes the name and pings nobody (said in the log). 5xx and 429 propagate: retried."""
        role = (self._approver_role or "").strip()
        if message.mention != "approvers" or not role or is_role_id(role):
            return []
        guild_id = message.thread.workspace
        if not guild_id.isascii() or not guild_id.isdigit():
            return []  # no guild's snowflake: no roles to read
        try:
            roles = await (await self._client()).get_roles(int(guild_id))
        except discord.LoginFailure as exc:
            _raise_auth(exc)
        except discord.HTTPException as exc:
            if exc.status == 401:
                _raise_auth(exc)
            if exc.status >= 500:
                raise
            log.warning(
                "cannot read the roles of guild %s (%s, code %s): the approvers' reminder names "
                "%r and pings nobody",
                guild_id, exc.status, exc.code, role,
            )  # fmt: skip
            return []
        ids = [str(r["id"]) for r in roles if r.get("name") == role]
        if not ids:
            log.warning(
                "guild %s has no role named %r: the approvers' reminder names it and pings nobody",
                guild_id, role,
            )  # fmt: skip
        return ids

    async def edit(self, edit: MessageEdit) -> None:
        """ThreadPoster.edit: PATCH the post with what happened and no buttons (repeatable)."""
        channel_id = _thread_channel_id(edit.thread.platform, edit.thread.thread, edit.key)
        try:
            message_id = int(edit.platform_message_id)
        except ValueError:
            _permanent(f"Discord message id {edit.platform_message_id!r} is not a snowflake")
        payload = edit_payload_for(edit)
        await self._request(
            channel_id,
            lambda http: http.edit_message(
                channel_id,
                message_id,
                params=MultipartParameters(payload=payload, multipart=None, files=None),
            ),
        )
        log.info("discord edit of %s in thread %s: %s", edit.key, channel_id, edit.outcome)

    async def _request(self, channel_id: int, call: Callable[[HTTPClient], Awaitable[Any]]) -> Any:
        """One REST call, its failures sorted into what Temporal should and should not retry."""
        try:
            return await call(await self._client())
        except discord.HTTPException as exc:
            _raise_for_http(exc, channel_id)
        except discord.LoginFailure as exc:
            _raise_auth(exc)
        except discord.RateLimited as exc:
            raise ApplicationError(
                f"Discord rate limit on thread {channel_id} lasts {exc.retry_after:.0f}s, longer "
                "than this Activity waits; Temporal will retry after it",
                type=RATE_LIMITED,
                next_retry_delay=timedelta(seconds=exc.retry_after),
            ) from exc
        # Anything else (5xx after discord.py's own retries, connection errors, timeouts) is
        # transient: it propagates and Temporal retries the Activity (a post with the same nonce).

    async def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    async def __aenter__(self) -> DiscordThreadPoster:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _client(self) -> HTTPClient:
        if self._http is not None:
            return self._http
        async with self._login_lock:
            if self._http is None:
                http = RoutedHTTPClient(
                    asyncio.get_running_loop(),
                    base_url=self._api_url,
                    max_ratelimit_timeout=self._max_ratelimit_wait,
                )
                try:
                    await http.static_login(self._token.get_secret_value())
                except BaseException:
                    # static_login opened a session before it failed; the next attempt opens anew.
                    await http.close()
                    raise
                self._http = http
        return self._http

    def _remember(self, nonce: str, message_id: str) -> None:
        self._posted[nonce] = message_id
        self._posted.move_to_end(nonce)
        while len(self._posted) > _REMEMBERED_POSTS:
            self._posted.popitem(last=False)


def _thread_channel_id(platform: str, thread: str, key: MessageKey) -> int:
    if platform != "discord":
        _permanent(f"message {key} is for {platform!r}, not discord")
    try:
        return int(thread)
    except ValueError:
        _permanent(f"Discord thread id {thread!r} is not a snowflake")


def _raise_for_http(exc: discord.HTTPException, channel_id: int) -> NoReturn:
    # Messages carry Discord's own error text and our ids, never the token or the message body.
    detail = f"{exc.status} {exc.response.reason} (code {exc.code}): {exc.text}"
    if isinstance(exc, discord.Forbidden):
        _permanent(
            f"Discord refused the post to thread {channel_id}: {detail}. The bot needs View "
            "Channel and Send Messages in Threads there (and to be added to a private thread).",
            exc,
        )
    if isinstance(exc, discord.NotFound):
        _permanent(
            f"Discord thread {channel_id} not found: {detail}. It was deleted, or the bot cannot "
            "see it.",
            exc,
        )
    if exc.status == 401:
        _raise_auth(exc)
    if isinstance(exc, discord.DiscordServerError) or exc.status >= 500:
        raise exc  # transient: Temporal retries
    # Any other 4xx (400 Invalid Form Body, ...) fails the same way on every retry.
    _permanent(f"Discord rejected the post to thread {channel_id}: {detail}", exc)


def _raise_auth(exc: Exception) -> NoReturn:
    # Retryable on purpose: a bad or revoked token is fixed by configuration, and the conversation
    # should resume once a Worker with a good token picks the task up, not lose this message.
    raise ApplicationError(
        "Discord rejected the bot token (401). Check DISCORD_TOKEN.", type=AUTH_ERROR
    ) from exc


def _permanent(text: str, cause: Exception | None = None) -> NoReturn:
    raise ApplicationError(text, type=PERMANENT_ERROR, non_retryable=True) from cause

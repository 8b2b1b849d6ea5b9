"""The Slack outbound half: the ThreadPoster the Worker's `post_to_thread` Activity uses.

Slack has no idempotency key for chat.postMessage, so each post carries its stable MessageKey in
message metadata, and a post first reads the thread to see whether an earlier attempt already
landed. Every retry other than a 429 is left to Temporal, because every Activity attempt repeats
that read and an SDK-level retry would not.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from datetime import timedelta
from typing import Any

from pydantic import SecretStr
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_slack_response import AsyncSlackResponse
from temporalio.exceptions import ApplicationError

from agent.models import MessageEdit, OutboundMessage, PostedMessage
from bot.slack.render import (
    blocks_for,
    edited_blocks,
    edited_line,
    fallback_text,
    metadata_for,
    metadata_key,
)
from bot.slack.settings import SLACK_API_URL, SlackSettings
from bot.slack.web_client import KeptAliveWebClient

log = logging.getLogger(__name__)

PERMANENT_ERROR_TYPE = "SlackPermanentError"
TRANSIENT_ERROR_TYPE = "SlackTransientError"
RATE_LIMITED_ERROR_TYPE = "SlackRateLimited"

# Slack answers request and configuration problems with HTTP 200 and ok=false; only these codes
# are documented as "try again later". Anything else will fail the same way on every attempt, so it
# is non-retryable rather than a silent retry loop under a waiting customer.
TRANSIENT_SLACK_ERRORS = frozenset(
    {
        "ratelimited",
        "internal_error",
        "fatal_error",
        "service_unavailable",
        "request_timeout",
        "team_added_to_org",  # the workspace is migrating into an Enterprise org
    }
)

_HINTS = {
    "channel_not_found": "check the channel id and that the bot can see the channel",
    "not_in_channel": "invite the bot to the channel",
    "is_archived": "the channel is archived",
    "thread_not_found": "the thread's root message no longer exists",
    "invalid_auth": "check SLACK_BOT_TOKEN",
    "not_authed": "SLACK_BOT_TOKEN was not sent",
    "token_revoked": "the bot token was revoked; reinstall the app",
    "account_inactive": "the bot token belongs to a deactivated app or user",
    "missing_scope": "add the scope to the app and reinstall it",
    "message_not_found": "the message was deleted",
    "cant_update_message": "only the bot's own messages can be edited",
}

REPLIES_PAGE_SIZE = 200  # Slack recommends no more than 200 per page


class BoundedRateLimitRetryHandler(AsyncRateLimitErrorRetryHandler):
    """Honours Retry-After on HTTP 429, but only for waits one Activity attempt can afford.

    A longer wait (or an unparsable header, which the SDK's handler would crash on) returns the 429
    to us instead, and the Activity fails with `next_retry_delay` set from Retry-After, so Temporal
    does the long wait without holding a Worker slot.
    """

    def __init__(self, *, max_retry_count: int, max_wait_seconds: int) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.max_wait_seconds = max_wait_seconds

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if not await super()._can_retry_async(
            state=state, request=request, response=response, error=error
        ):
            return False
        assert response is not None  # the parent only retries on a 429 response
        wait = retry_after_seconds(response.headers)
        return wait is not None and wait <= self.max_wait_seconds


def retry_after_seconds(headers: Mapping[str, Any]) -> int | None:
    """Retry-After in whole seconds from either aiohttp headers or the SDK's dict of lists."""
    for name, value in headers.items():
        if name.lower() != "retry-after":
            continue
        if isinstance(value, list):
            value = value[0] if value else ""
        try:
            return max(0, int(str(value).strip()))
        except ValueError:
            return None  # an HTTP-date; Slack sends seconds
    return None


class SlackThreadPoster:
    """ThreadPoster for Slack: posts into `message.thread`, at most once per `message.key`."""

    def __init__(
        self,
        token: SecretStr | str,
        api_url: str = SLACK_API_URL,
        *,
        timeout_seconds: int = 10,
        max_rate_limit_retries: int = 5,
        max_retry_after_seconds: int = 10,
        approver_group: str | None = None,
    ) -> None:
        """`approver_group`: SLACK_APPROVER_GROUP, the group the approvers' reminder mentions."""
        self._approver_group = approver_group
        secret = token if isinstance(token, SecretStr) else SecretStr(token)
        handlers: list[AsyncRetryHandler] = [
            BoundedRateLimitRetryHandler(
                max_retry_count=max_rate_limit_retries,
                max_wait_seconds=max_retry_after_seconds,
            )
        ]
        # Deliberately without the SDK's connection-error handler: a reset after Slack accepted a
        # chat.postMessage would be re-sent without the metadata check. Temporal retries instead.
        # Kept alive: every post is two calls, and each would otherwise open a connection.
        self._client = KeptAliveWebClient(
            token=secret.get_secret_value(),
            base_url=api_url,
            timeout=timeout_seconds,
            retry_handlers=handlers,
        )

    @classmethod
    def from_settings(cls, settings: SlackSettings, **kwargs: Any) -> SlackThreadPoster:
        if settings.bot_token is None:
            raise ValueError("SLACK_BOT_TOKEN is not set; Slack outbound cannot be built")
        kwargs.setdefault("approver_group", settings.approver_group)
        return cls(settings.bot_token, settings.api_url, **kwargs)

    async def close(self) -> None:
        """Close the kept-alive connections (the Worker does, as it stops)."""
        await self._client.close()

    async def __aenter__(self) -> SlackThreadPoster:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def post(self, message: OutboundMessage) -> PostedMessage:
        thread = message.thread
        if thread.platform != "slack" or not thread.thread:
            # Without a thread_ts chat.postMessage would post at the channel's top level.
            raise ApplicationError(
                f"not a Slack thread: platform={thread.platform!r} thread={thread.thread!r}",
                type=PERMANENT_ERROR_TYPE,
                non_retryable=True,
            )
        key = str(message.key)

        earlier = await self.find_posted(thread.channel, thread.thread, key)
        if earlier is not None:
            log.info(
                "slack post %s already in %s/%s as %s", key, thread.channel, thread.thread, earlier
            )
            return PostedMessage(platform_message_id=earlier, duplicate=True)

        response = await _call(
            "chat.postMessage",
            thread.channel,
            self._client.chat_postMessage(
                channel=thread.channel,
                thread_ts=thread.thread,  # always a reply, never a top-level post
                text=fallback_text(message, self._approver_group),
                blocks=blocks_for(message, self._approver_group),
                metadata=metadata_for(message),
                unfurl_links=False,
                unfurl_media=False,
                # Explicitly off: the text is escaped and must never turn into a group mention;
                # the one mention a post may carry (the approvers' group) is explicit markup.
                link_names=False,
            ),
        )
        ts = str(response["ts"])
        log.info("slack post %s landed in %s/%s as %s", key, thread.channel, thread.thread, ts)
        return PostedMessage(platform_message_id=ts, duplicate=False)

    async def edit(self, edit: MessageEdit) -> None:
        """ThreadPoster.edit: chat.update of the post; the same update again changes nothing.

        The message keeps its metadata (chat.update leaves it when none is sent), so its key
        still finds it.
        """
        thread = edit.thread
        if thread.platform != "slack":
            raise ApplicationError(
                f"not a Slack thread: platform={thread.platform!r}",
                type=PERMANENT_ERROR_TYPE,
                non_retryable=True,
            )
        await _call(
            "chat.update",
            thread.channel,
            self._client.chat_update(
                channel=thread.channel,
                ts=edit.platform_message_id,
                text=edited_line(edit),  # notifications show what happened
                blocks=edited_blocks(edit),
                link_names=False,
            ),
        )
        log.info("slack edit of %s in %s: %s", edit.key, thread.channel, edit.outcome)

    async def find_posted(self, channel: str, thread_ts: str, key: str) -> str | None:
        """The ts of the message in this thread (root included) whose metadata carries `key`."""
        cursor: str | None = None
        seen_cursors: set[str] = set()
        while True:
            response = await _call(
                "conversations.replies",
                channel,
                self._client.conversations_replies(
                    channel=channel,
                    ts=thread_ts,
                    include_all_metadata=True,
                    limit=REPLIES_PAGE_SIZE,
                    cursor=cursor,
                ),
            )
            for slack_message in response.get("messages") or []:
                if metadata_key(slack_message) == key:
                    return str(slack_message["ts"])
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if cursor is None or cursor in seen_cursors:
                return None
            seen_cursors.add(cursor)


async def _call(
    method: str, channel: str, request: Awaitable[AsyncSlackResponse]
) -> AsyncSlackResponse:
    # Network errors and timeouts (aiohttp.ClientError, TimeoutError) pass through untouched:
    # Temporal retries them as ordinary Activity failures.
    try:
        return await request
    except SlackApiError as exc:
        raise _application_error(method, channel, exc) from exc


def slack_error_code(exc: SlackApiError) -> str:
    """Slack's error code ("channel_not_found", …), or http_<status> when the body has none."""
    data = exc.response.data if isinstance(exc.response.data, dict) else {}
    return str(data.get("error") or f"http_{exc.response.status_code}")


def is_transient(exc: SlackApiError) -> bool:
    """Whether the same call may succeed later: HTTP 429 or 5xx, or a documented transient code."""
    status = int(exc.response.status_code)
    return status == 429 or status >= 500 or slack_error_code(exc) in TRANSIENT_SLACK_ERRORS


def _application_error(method: str, channel: str, exc: SlackApiError) -> ApplicationError:
    # Built only from the method, the channel, the status and Slack's error code: never from the
    # request, whose headers hold the token.
    response = exc.response
    status = int(response.status_code)
    data = response.data if isinstance(response.data, dict) else {}
    code = slack_error_code(exc)
    where = f"Slack {method} (channel {channel})"

    if status == 429 or code == "ratelimited":
        wait = retry_after_seconds(response.headers or {})
        return ApplicationError(
            f"{where} is rate limited; retry after {wait if wait is not None else '?'} s",
            type=RATE_LIMITED_ERROR_TYPE,
            next_retry_delay=timedelta(seconds=wait) if wait else None,
        )
    if is_transient(exc):
        return ApplicationError(
            f"{where} failed: {code} (HTTP {status})", type=TRANSIENT_ERROR_TYPE
        )

    hint = _HINTS.get(code)
    if code == "missing_scope" and data.get("needed"):
        hint = f"{hint}: {data['needed']}"
    return ApplicationError(
        f"{where} failed: {code}" + (f" ({hint})" if hint else ""),
        type=PERMANENT_ERROR_TYPE,
        non_retryable=True,
    )

"""Slack's requests, checked before bolt sees them: forged is 401, malformed is 400, never 500.

    HTTP POST   -> signature over the raw bytes (401) -> parse_body, read_request (400) -> typed
    Socket Mode -> read_request (acked; an event or click kept as a dead letter) -> typed
    typed -> a kind refund-bot handles -> bolt -> listener, which reads the typed request
          -> URL verification -> its challenge, answered here
          -> anything else -> 200, ignored (a 4xx or 404 would make Slack retry it)

Bolt's own HTTP path parses the body in `AsyncBoltRequest.__init__`, before its RequestVerification
middleware looks at the signature, so a forged request with a malformed body raised a
JSONDecodeError (HTTP 500) instead of being refused; a body of the wrong shape raised inside bolt's
middleware and listener matchers (500 again), or reached a listener after the ack and raised
there, so a customer's message was acknowledged and lost. Here the signature is checked first, on
the bytes as received; then the body is read, once, into the typed models below, strict in every
field a listener or bolt reads; only a request that fits reaches bolt, carrying its typed form in
bolt's context (`typed`), and the listeners read that, never the dict.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

import pydantic_core
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import send_async_response
from slack_bolt.adapter.socket_mode.internals import build_headers
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.request.async_internals import build_async_context
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from yarl import URL, query_to_pairs

from bot.conversations import Router, keep_unreadable

log = logging.getLogger(__name__)

# Slack's documented replay window for a signed request.
MAX_REQUEST_AGE_SECONDS = 5 * 60
# A Unix time in seconds has 10 digits until the year 2286; int() of a longer string is refused
# past 4,300 digits (ValueError), and any past 12 is no timestamp Slack sends.
_MAX_TIMESTAMP_DIGITS = 12
# Where the typed request rides in bolt's context, for the listeners.
TYPED = "refund_bot_request"


class MalformedRequest(ValueError):
    """A correctly signed body that is not what Slack sends (HTTP 400)."""


def signature_valid(
    signing_secret: str, raw: bytes, headers: Mapping[str, str], now: float | None = None
) -> bool:
    """Slack's v0 signature: HMAC-SHA256 of `v0:{timestamp}:{body}`, the timestamp recent.

    Computed over the raw bytes: slack_sdk's SignatureVerifier decodes the body as UTF-8 and
    int()s the timestamp header first, so a forged request with bad bytes or a bad timestamp
    would raise instead of being refused.
    """
    timestamp = headers.get("X-Slack-Request-Timestamp") or ""
    signature = headers.get("X-Slack-Signature") or ""
    if len(timestamp) > _MAX_TIMESTAMP_DIGITS or not timestamp.isascii():
        return False
    if not timestamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > MAX_REQUEST_AGE_SECONDS:
        return False
    digest = hmac.digest(signing_secret.encode(), b"v0:%s:%s" % (timestamp.encode(), raw), "sha256")
    return hmac.compare_digest(b"v0=" + digest.hex().encode(), signature.encode(errors="replace"))


def parse_body(raw: bytes, content_type: str | None) -> dict[str, Any]:
    """The body as Slack sends it: JSON (Events API), `payload=<JSON>` (interactivity and
    shortcuts) or a plain form (slash commands). Raises MalformedRequest for anything else.

    Upstream: slack_bolt.request.internals.parse_body treats every form body that merely
    *contains* the substring "payload" as an interactivity payload, so a slash command whose text
    is `payload` (`/refund-status payload`) parses to {} and bolt answers 404 "unhandled
    request". Here only a form whose one field is named `payload` is one.
    """
    if not raw:
        raise MalformedRequest("the body is empty")
    try:
        # pydantic's JSON parser (jiter) takes a third less time than json.loads on the ack
        # path, and checks the bytes are UTF-8 as it reads them. Unlike json.loads it refuses a
        # lone surrogate escape (`\ud800`) and nesting deeper than 200, neither of which a Slack
        # payload has (its text is UTF-8, which cannot hold a lone surrogate).
        if content_type == "application/json" or raw.startswith(b"{"):
            body = pydantic_core.from_json(raw)
        else:
            # urllib's parse_qsl(..., keep_blank_values=True), in a quarter of its time.
            fields = dict(query_to_pairs(raw.decode("utf-8")))
            body = pydantic_core.from_json(fields["payload"]) if "payload" in fields else fields
    except UnicodeDecodeError as err:
        raise MalformedRequest("the body is not UTF-8") from err
    except ValueError as err:
        raise MalformedRequest("the body is not valid JSON or form data") from err
    if not isinstance(body, dict):
        raise MalformedRequest("the body is not a JSON object")
    return body


# ---------------------------------------------------------------------------------------------
# What Slack sends, as far as bolt and refund-bot's listeners read it: every field read has its
# type here, so nothing past the check can raise on one. Fields not named are Slack's to add:
# neither checked nor copied.
# ---------------------------------------------------------------------------------------------


def _usable_url(url: str) -> str:
    # Bolt's `respond` posts to it: a relative, schemeless or unparsable URL raised there.
    try:
        parsed = URL(url)
        usable = parsed.scheme in ("https", "http") and bool(parsed.host)
    except (ValueError, TypeError):
        usable = False
    if not usable:
        raise ValueError("not an absolute http(s) URL")
    return url


ResponseUrl = Annotated[str, AfterValidator(_usable_url)]


class _Shape(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class Profile(_Shape):
    display_name: str | None = None
    real_name: str | None = None


class MessageEvent(_Shape):
    type: Literal["message"]
    subtype: str | None = None
    channel: str | None = None
    channel_type: str | None = None
    user: str | None = None
    text: str | None = None
    ts: str | None = None
    thread_ts: str | None = None
    bot_id: str | None = None
    bot_profile: dict[str, Any] | None = None
    team: str | None = None
    user_profile: Profile | None = None
    # Read by bolt (message_changed and message_deleted carry the message in these).
    message: dict[str, Any] | None = None
    previous_message: dict[str, Any] | None = None


class _Authorization(_Shape):
    enterprise_id: str | None = None
    team_id: str | None = None
    user_id: str | None = None
    is_bot: bool | None = None
    is_enterprise_install: bool | None = None


class MessageEventCallback(_Shape):
    """An Events API `message` event: a customer's words, maybe."""

    type: Literal["event_callback"]
    event: MessageEvent
    event_id: str | None = None
    team_id: str | None = None
    enterprise_id: str | None = None
    authorizations: list[_Authorization] | None = None


class _AnyEvent(_Shape):
    type: str


class _AnyEventCallback(_Shape):
    type: Literal["event_callback"]
    event: _AnyEvent


class Ref(_Shape):
    """`team` or `channel` in an interaction: an object with an id."""

    id: str | None = None


class User(_Shape):
    id: str
    username: str | None = None
    name: str | None = None
    team_id: str | None = None


class Container(_Shape):
    channel_id: str | None = None
    message_ts: str | None = None
    thread_ts: str | None = None


class PostedMessage(_Shape):
    """The message a button or shortcut was used on, as the interaction carries it."""

    ts: str | None = None
    thread_ts: str | None = None
    text: str | None = None
    blocks: list[dict[str, Any]] | None = None


class Action(_Shape):
    action_id: str
    block_id: str | None = None
    value: str | None = None
    action_ts: str | None = None


class BlockActions(_Shape):
    """A button pressed."""

    type: Literal["block_actions"]
    user: User
    actions: list[Action] = Field(min_length=1)
    team: Ref | None = None
    channel: Ref | None = None
    container: Container | None = None
    message: PostedMessage | None = None
    trigger_id: str | None = None
    response_url: ResponseUrl | None = None


class MessageShortcut(_Shape):
    """A message shortcut run on a message."""

    type: Literal["message_action"]
    callback_id: str
    user: User
    team: Ref | None = None
    channel: Ref | None = None
    message: PostedMessage | None = None
    trigger_id: str | None = None
    response_url: ResponseUrl | None = None


class SlashCommand(_Shape):
    """A slash command: a form, all strings. Its answer goes to its response_url."""

    command: str
    text: str = ""
    user_id: str
    user_name: str | None = None
    team_id: str | None = None
    channel_id: str | None = None
    response_url: ResponseUrl


class UrlVerification(_Shape):
    """Slack checking the Request URL: answered with its challenge, by the HTTP handler."""

    type: Literal["url_verification"]
    challenge: str


@dataclass(frozen=True, slots=True)
class Ignored:
    """A request refund-bot does not handle (another event type, `app_rate_limited`, a form
    without a command): acknowledged, so that Slack does not retry it, and dropped."""

    kind: str


SlackRequest = (
    MessageEventCallback | BlockActions | MessageShortcut | SlashCommand | UrlVerification | Ignored
)
_Typed = TypeVar("_Typed", bound=BaseModel)


def _read(model: type[_Typed], body: dict[str, Any]) -> _Typed:
    try:
        return model.model_validate(body)
    except ValidationError as err:
        first = err.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise MalformedRequest(f"`{where}`: {first['msg']}") from None


def read_request(body: dict[str, Any]) -> SlackRequest:
    """The body as the request it is, typed; MalformedRequest when a field that bolt or a
    listener reads has the wrong type. Kinds refund-bot does not handle come back Ignored."""
    kind = body.get("type")
    if kind is not None and not isinstance(kind, str):
        raise MalformedRequest("`type` is not a string")
    if kind == "url_verification":
        return _read(UrlVerification, body)
    if kind == "event_callback":
        event_type = _read(_AnyEventCallback, body).event.type
        if event_type != "message":
            return Ignored(f"event {event_type}")
        return _read(MessageEventCallback, body)
    if kind == "block_actions":
        return _read(BlockActions, body)
    if kind == "message_action":
        return _read(MessageShortcut, body)
    if kind is None and "command" in body:
        return _read(SlashCommand, body)
    return Ignored(kind or "a request without a type or command")


def bolt_context(request: SlackRequest, body: dict[str, Any]) -> AsyncBoltContext:
    """The context bolt derives from the body, carrying the typed request: building it is the
    last check (bolt reads ids out of any payload, and a wrong type there raises)."""
    try:
        return build_async_context(AsyncBoltContext({TYPED: request}), body)
    except (TypeError, KeyError, AttributeError, IndexError, ValueError) as err:
        raise MalformedRequest(f"bolt cannot read the payload's ids ({err!r})") from err


def typed(model: type[_Typed], context: AsyncBoltContext, body: dict[str, Any]) -> _Typed:
    """A listener's request, as read at the edge (from bolt's context); read here when bolt was
    handed a request that did not pass the edge (a test dispatching to the app directly).
    Raises MalformedRequest when it is not a `model`."""
    request = context.get(TYPED)
    if request is None:
        request = read_request(body)
    if not isinstance(request, model):
        raise MalformedRequest(f"not a {model.__name__}")
    return request


@dataclass(slots=True)
class Checked:
    """A request Slack signed and shaped as Slack sends: its bytes, their parsed form, the typed
    request, and (for a kind bolt handles) the context bolt derives from the body."""

    raw: bytes
    body: dict[str, Any]
    request: SlackRequest
    context: AsyncBoltContext | None


def bolt_request(checked: Checked, query: str, headers: Mapping[str, str]) -> AsyncBoltRequest:
    """An HTTP-mode AsyncBoltRequest carrying the body parsed (and checked) here.

    AsyncBoltRequest parses its `body` argument itself (with the "payload" mistake above), so it
    is built empty and given the raw text, the parsed body and the context bolt derives from it.
    """
    request = AsyncBoltRequest(body="", query=query, headers=dict(headers))
    request.raw_body = checked.raw.decode("utf-8")  # bolt's own signature check reads this
    request.body = checked.body
    request.context = checked.context or bolt_context(checked.request, checked.body)
    return request


# Whether the app has a listener for a (typed) request: bot.slack.app's `handled`.
Handles = Callable[[SlackRequest], bool]
# Write a customer message ahead to the inbox before its ack: False if it could not be kept.
KeptAhead = Callable[[SlackRequest], Awaitable[bool]]
# Socket Mode envelopes that carry a customer's message or a click, maybe: kept if unreadable.
_KEPT_AS: dict[str, Literal["message", "click"]] = {"events_api": "message", "interactive": "click"}


class CheckedSocketModeHandler(AsyncSocketModeHandler):
    """Socket Mode with the same checks. Every envelope is acknowledged, whatever becomes of it,
    so that Slack does not redeliver it for ever: one that does not fit is logged in one line,
    and kept as a dead letter when it was an event or an interaction (a message or a click,
    maybe); one the app does not handle is dropped; a customer message is written ahead to the
    inbox before its ack (not acknowledged when it cannot be: Slack sends it again); the rest
    goes to bolt, typed."""

    def __init__(
        self,
        app: AsyncApp,
        app_token: str,
        *,
        handles: Handles,
        router: Router,
        kept_ahead: KeptAhead,
        **kwargs: Any,
    ) -> None:
        super().__init__(app, app_token, **kwargs)
        self._handles = handles
        self._router = router
        self._kept_ahead = kept_ahead
        self.client.message_listeners.append(self._unwrappable)

    async def _unwrappable(
        self, client: AsyncBaseSocketModeClient, message: dict[str, Any], _: str | None
    ) -> None:
        """An envelope whose payload the SDK cannot wrap (a list, a number, null): it raises
        before `handle` sees it, logging an error and never acknowledging it. Acked and kept here,
        and its payload taken out so that the SDK passes it over."""
        if "envelope_id" not in message or "payload" not in message:
            return
        payload = message["payload"]
        if isinstance(payload, dict | str):  # what the SDK wraps (a string as {"text": …})
            return
        del message["payload"]
        kind = message.get("type")
        log.warning("slack: a %s envelope whose payload is not an object", kind)
        await self._ack(client, str(message["envelope_id"]))
        if isinstance(kind, str) and kind in _KEPT_AS:
            reason = "the payload is not a JSON object"
            await keep_unreadable(self._router, "slack", _KEPT_AS[kind], payload, reason)

    async def handle(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        start = time.time()
        try:
            if not isinstance(req.payload, dict):
                raise MalformedRequest("the payload is not a JSON object")
            request = read_request(req.payload)
            context = bolt_context(request, req.payload) if self._handles(request) else None
        except MalformedRequest as err:
            log.warning("slack: a malformed %s envelope: %s", req.type, err)
            await self._ack(client, req.envelope_id)
            if req.type in _KEPT_AS:
                await keep_unreadable(
                    self._router, "slack", _KEPT_AS[req.type], req.payload, str(err)
                )
            return
        if context is None:
            log.debug("slack: ignored a %s envelope (%s)", req.type, _kind(request))
            await self._ack(client, req.envelope_id)
            return
        if not await self._kept_ahead(request):
            return  # not acknowledged: Slack sends the envelope again
        bolt = AsyncBoltRequest(
            mode="socket_mode", body=req.payload, headers=build_headers(req), context=context
        )
        response = await self.app.async_dispatch(bolt)
        if response.status != 200:
            log.warning("slack: bolt answered %s to a %s envelope", response.status, req.type)
            await self._ack(client, req.envelope_id)
            return
        await send_async_response(client, req, response, start)

    @staticmethod
    async def _ack(client: AsyncBaseSocketModeClient, envelope_id: str) -> None:
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=envelope_id))


def _kind(request: SlackRequest) -> str:
    return request.kind if isinstance(request, Ignored) else type(request).__name__

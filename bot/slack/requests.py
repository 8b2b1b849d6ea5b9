"""Slack's requests, checked before bolt parses them: forged is 401, malformed is 400, never 500.

    HTTP POST   -> signature over the raw bytes (401) -> parse_body, check_shape (400) -> bolt
    Socket Mode -> check_shape (acked, logged and dropped) -> bolt

Bolt's own HTTP path parses the body in `AsyncBoltRequest.__init__`, before its RequestVerification
middleware looks at the signature, so a forged request with a malformed body raised a
JSONDecodeError (HTTP 500) instead of being refused; and a body of the wrong shape (`actions` a
string, `event` a list) raised inside bolt's listener matchers (500 again). Here the signature is
checked first, on the bytes as received, then the body is parsed and its shape checked against
what Slack sends, and only then does bolt see it (its own signature check still runs: harmless).
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import pydantic_core
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.request.async_internals import build_async_context
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from yarl import query_to_pairs

log = logging.getLogger(__name__)

# Slack's documented replay window for a signed request.
MAX_REQUEST_AGE_SECONDS = 5 * 60
# A Unix time in seconds has 10 digits until the year 2286; int() of a longer string is refused
# past 4,300 digits (ValueError), and any past 12 is no timestamp Slack sends.
_MAX_TIMESTAMP_DIGITS = 12


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
# The shape Slack sends, as far as bolt's matchers and refund-bot's listeners read it. Only the
# kinds refund-bot handles are checked closely: another event type or interaction (an operator
# may subscribe to more) passes, because a 4xx to a genuine event makes Slack back off.
# ---------------------------------------------------------------------------------------------


class _Shape(BaseModel):
    # Fields not named here are Slack's to add: neither checked nor copied (the checked body,
    # not these models, is what bolt gets).
    model_config = ConfigDict(extra="ignore", strict=True)


class _Event(_Shape):
    type: str


class _MessageEvent(_Event):
    subtype: str | None = None
    channel: str | None = None
    user: str | None = None
    text: str | None = None
    ts: str | None = None
    thread_ts: str | None = None
    bot_id: str | None = None
    team: str | None = None
    user_profile: dict[str, Any] | None = None
    message: dict[str, Any] | None = None
    previous_message: dict[str, Any] | None = None


def _event_kind(event: Any) -> str:
    return "message" if isinstance(event, dict) and event.get("type") == "message" else "other"


class _EventCallback(_Shape):
    type: Literal["event_callback"]
    # A message event is checked field by field, any other event for its type only.
    event: Annotated[
        Annotated[_MessageEvent, Tag("message")] | Annotated[_Event, Tag("other")],
        Discriminator(_event_kind),
    ]
    event_id: str | None = None
    team_id: str | None = None
    authorizations: list[dict[str, Any]] | None = None


class _User(_Shape):
    id: str
    username: str | None = None
    name: str | None = None
    team_id: str | None = None


class _Action(_Shape):
    action_id: str
    block_id: str | None = None
    value: str | None = None
    action_ts: str | None = None


class _Interaction(_Shape):
    type: str
    user: _User
    team: dict[str, Any] | None = None
    channel: dict[str, Any] | None = None
    message: dict[str, Any] | None = None
    response_url: str | None = None
    trigger_id: str | None = None


class _BlockActions(_Interaction):
    type: Literal["block_actions"]
    actions: list[_Action] = Field(min_length=1)
    container: dict[str, Any] | None = None


class _MessageAction(_Interaction):
    type: Literal["message_action"]
    callback_id: str


class _SlashCommand(_Shape):
    command: str
    text: str = ""
    user_id: str
    team_id: str | None = None


def check_shape(body: dict[str, Any]) -> AsyncBoltContext:
    """Raise MalformedRequest when a field that bolt or a listener reads has the wrong type.

    Returns the context bolt derives from the body: building it is the last check, and the request
    handed to bolt afterwards (bolt_request) carries it rather than building it again."""
    kind = body.get("type")
    model: type[_Shape] | None = None
    if kind == "event_callback":
        model = _EventCallback
    elif kind == "block_actions":
        model = _BlockActions
    elif kind == "message_action":
        model = _MessageAction
    elif "command" in body:
        model = _SlashCommand
    elif kind is not None and not isinstance(kind, str):
        raise MalformedRequest("`type` is not a string")
    try:
        if model is not None:
            model.model_validate(body)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise MalformedRequest(f"`{where}`: {first['msg']}") from err
    try:
        # Bolt reads ids out of any payload to build its context: a wrong type there raises.
        return build_async_context(AsyncBoltContext({}), body)
    except (TypeError, KeyError, AttributeError, IndexError, ValueError) as err:
        raise MalformedRequest(f"bolt cannot read the payload's ids ({err!r})") from err


@dataclass(slots=True)
class Checked:
    """A request Slack signed and shaped as Slack sends: its bytes, their parsed form, and the
    context bolt derives from that (check_shape's)."""

    raw: bytes
    body: dict[str, Any]
    context: AsyncBoltContext


def bolt_request(checked: Checked, query: str, headers: Mapping[str, str]) -> AsyncBoltRequest:
    """An HTTP-mode AsyncBoltRequest carrying the body parsed (and checked) here.

    AsyncBoltRequest parses its `body` argument itself (with the "payload" mistake above), so it
    is built empty and given the raw text, the parsed body and the context bolt derives from it.
    """
    request = AsyncBoltRequest(body="", query=query, headers=dict(headers))
    request.raw_body = checked.raw.decode("utf-8")  # bolt's own signature check reads this
    request.body = checked.body
    request.context = checked.context
    return request


class CheckedSocketModeHandler(AsyncSocketModeHandler):
    """Socket Mode with the same shape check: an envelope whose payload bolt cannot read is
    acknowledged (so Slack does not redeliver it for ever) and dropped with one log line, instead
    of bolt answering 500 and leaving it unacknowledged."""

    async def handle(  # type: ignore[override]
        self, client: AsyncBaseSocketModeClient, req: SocketModeRequest
    ) -> None:
        try:
            if not isinstance(req.payload, dict):
                raise MalformedRequest("the payload is not a JSON object")
            check_shape(req.payload)
        except MalformedRequest as err:
            log.warning("slack: dropped a malformed %s envelope: %s", req.type, err)
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return
        await super().handle(client, req)

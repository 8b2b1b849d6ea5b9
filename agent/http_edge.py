"""Every aiohttp server of refund-bot, at its edge: HTTP it cannot read is a 400 and one log line.

    bytes that are not HTTP -> aiohttp's parser refuses them (400) -> one warning line, no traceback
    a body that does not decode (Content-Encoding, chunks) -> read_body -> 400, one warning line

aiohttp answers a request it cannot parse (a path or header past its limits, raw garbage) with
400, and logs each at ERROR with a traceback: anyone who can reach a port could fill the log that
way. A body it cannot decode (`Content-Encoding: gzip` on bytes that are not gzip) surfaces in the
handler's `request.read()` instead, as an exception that became a 500. Each server here (the Slack
HTTP app, the bot's /healthz and /metrics, the codec server) is run with `runner`, whose log keeps
a refusal to one warning line, and reads bodies with `read_body`. An exception of the server's own
is still logged with its traceback: that is a bug to see, not input to refuse.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

log = logging.getLogger(__name__)

# aiohttp's own server logger: an operator's logging configuration for it still applies.
_AIOHTTP_SERVER = logging.getLogger("aiohttp.server")
_MAX_REASON = 200
_REFUSED_BODY = "Refused a request body"


class BodyUnreadable(web.HTTPBadRequest):
    """A request body aiohttp could not decode: the client's mistake, answered 400."""


def refused_input(err: BaseException | None) -> HttpProcessingError | None:
    """The HTTP parsing error at the root of `err`, if it is one (aiohttp wraps them)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, HttpProcessingError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def reason(err: BaseException) -> str:
    """`400, message: Invalid method …` -> one bounded line without the bytes that caused it."""
    if isinstance(err, HttpProcessingError):
        # Its str() repeats the offending bytes (a 100 KB header); the message names the problem.
        text = (err.message or "").strip().splitlines()
        first = re.split(r": (?:bytearray\()?b['\"]", text[0])[0] if text else ""
        line = f"{type(err).__name__}: {first}"
    else:
        line = f"{type(err).__name__}: {str(err).strip()[:_MAX_REASON]}"
    return line if len(line) <= _MAX_REASON else line[: _MAX_REASON - 1] + "…"


class _OneLineServerLog(logging.LoggerAdapter):
    """aiohttp's server log, each refusal of malformed HTTP one warning line."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        return msg, kwargs

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        err = exc_info if isinstance(exc_info, BaseException) else None
        if exc_info is True or isinstance(exc_info, tuple):
            err = sys.exc_info()[1] if exc_info is True else exc_info[1]
        refused = refused_input(err)
        if refused is None:
            super().log(level, msg, *args, **kwargs)
            return
        kwargs.pop("exc_info", None)
        # aiohttp calls a body it could not decode after the handler an "Unhandled exception".
        text = _REFUSED_BODY if msg == "Unhandled exception" else (msg % args if args else msg)
        super().log(min(level, logging.WARNING), "%s: %s", text, reason(refused), **kwargs)


# What every refund-bot aiohttp server logs through (`runner` hands it to aiohttp).
SERVER_LOG = _OneLineServerLog(_AIOHTTP_SERVER, {})


def runner(app: web.Application, **kwargs: Any) -> web.AppRunner:
    """An AppRunner for `app` whose refusals of malformed HTTP are one line each, no access log."""
    kwargs.setdefault("access_log", None)
    return web.AppRunner(app, logger=SERVER_LOG, **kwargs)


async def read_body(request: web.Request, what: str) -> bytes:
    """The request's body, decoded as its headers say; a body that does not decode is a 400
    (raised: BodyUnreadable) and one warning line naming `what` was refused."""
    try:
        return await request.read()
    except RequestPayloadError as err:
        why = reason(refused_input(err) or err)
        log.warning("%s: refused a body that does not decode (%s)", what, why)
        # The rest of the body is left unread and the connection closed after the answer:
        # aiohttp would otherwise read on to keep it, fail the same way, and log it again.
        request.content.feed_eof()
        refused = BodyUnreadable(text="the body does not decode as its headers say\n")
        refused.force_close()
        raise refused from None

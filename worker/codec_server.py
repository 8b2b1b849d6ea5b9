"""`refund-bot codec-server`: the payload codec over HTTP, so operators read histories decrypted.

    Web UI or `temporal --codec-endpoint` -> POST /decode {"payloads": [...]} -> AesGcmCodec -> JSON

The Temporal codec server protocol: POST /encode and POST /decode take and return a `Payloads`
message in protobuf JSON (`{"payloads": [{"metadata": {...}, "data": "<base64>"}]}`), with the
namespace in the X-Namespace header. The server listens on loopback by default; with
CODEC_SERVER_TOKEN set it wants `Authorization: Bearer <token>`, and it refuses to listen beyond
loopback without one, since whoever reaches it reads every conversation. Browsers calling from an
allowed origin (the Web UI) get CORS headers, preflight included.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence

from aiohttp import web
from google.protobuf import json_format
from pydantic import SecretStr
from temporalio.api.common.v1 import Payloads
from temporalio.converter import PayloadCodec

from agent import http_edge
from agent.codec import AesGcmCodec, CodecError, CodecKey
from agent.settings import CodecServerSettings, TemporalSettings

log = logging.getLogger(__name__)

# The Web UI decodes a page of history at a time; a payload is at most 2 MB on the server.
MAX_BODY_BYTES = 16 * 1024 * 1024
_CORS_REQUEST_HEADERS = "Authorization, Content-Type, X-Namespace"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class CodecServerRefused(RuntimeError):
    """The settings would expose the codec: refused at start-up, in one line."""


def allowed_origins(server: CodecServerSettings, temporal: TemporalSettings) -> frozenset[str]:
    if server.cors_origins.strip():
        return frozenset(o.strip().rstrip("/") for o in server.cors_origins.split(",") if o.strip())
    port = temporal.ui_port
    return frozenset({f"http://localhost:{port}", f"http://127.0.0.1:{port}"})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def codec_app(
    codec: PayloadCodec,
    namespace: str,
    origins: Collection[str],
    token: SecretStr | None = None,
) -> web.Application:
    """The codec server's aiohttp application (refund-bot codec-server serves it)."""
    expected = f"Bearer {token.get_secret_value()}".encode() if token else None

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        cors = origin is not None and origin in origins
        if request.method == "OPTIONS":
            # A browser's preflight carries no credentials: answer it, or refuse the origin.
            response: web.StreamResponse = web.Response(status=204 if cors else 403)
            if cors:
                response.headers["Access-Control-Allow-Methods"] = "POST, OPTIONS"
                response.headers["Access-Control-Allow-Headers"] = _CORS_REQUEST_HEADERS
                response.headers["Access-Control-Max-Age"] = "600"
        elif expected is not None and not hmac.compare_digest(_raw_header(request), expected):
            response = web.Response(
                status=401,
                text="this codec server wants Authorization: Bearer <CODEC_SERVER_TOKEN>\n",
                headers={"WWW-Authenticate": 'Bearer realm="refund-bot codec"'},
            )
        elif request.headers.get("X-Namespace", namespace) != namespace:
            response = web.Response(
                status=403, text=f"this codec server decodes namespace {namespace!r} only\n"
            )
        else:
            response = await handler(request)
        if cors:
            assert origin is not None  # cors: the request named an allowed origin
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Allow-Credentials"] = "true"
        response.headers["Vary"] = "Origin"
        return response

    def endpoint(transform: Callable[[Payloads], Awaitable[None]]) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            try:
                payloads = read_payloads(await http_edge.read_body(request, "codec server"))
            except NotPayloads as err:
                return web.Response(status=400, text=f"{err}\n")
            try:
                await transform(payloads)
            except CodecError as err:
                log.warning("codec request failed: %s", err)
                return web.Response(status=400, text=f"{err}\n")
            return web.json_response(json_format.MessageToDict(payloads))

        return handle

    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/encode", endpoint(codec.encode_wrapper))
    app.router.add_post("/decode", endpoint(codec.decode_wrapper))
    return app


class NotPayloads(ValueError):
    """A body that is not the protocol's `{"payloads": [...]}` in UTF-8 JSON (HTTP 400)."""


def read_payloads(raw: bytes) -> Payloads:
    """The body as the protocol's Payloads message, or NotPayloads saying why not.

    Read as UTF-8 whatever charset the Content-Type names: JSON is UTF-8 (RFC 8259), and a
    charset Python does not know, or bytes that are not in it, raised out of request.text().
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NotPayloads("the body is not UTF-8") from None
    try:
        return json_format.Parse(text, Payloads())
    except json_format.ParseError:
        raise NotPayloads('the body is not {"payloads": [...]}') from None


def _raw_header(request: web.Request) -> bytes:
    # aiohttp keeps header bytes that are not UTF-8 as surrogates, which a plain encode() refuses:
    # the bytes as received, compared with the token's.
    try:
        return request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return b""  # a surrogate no bytes decode to: matches no token


async def serve(
    server: CodecServerSettings, keys: Sequence[CodecKey], temporal: TemporalSettings
) -> None:
    """Serve until cancelled (the CLI cancels it on SIGTERM, SIGHUP or SIGINT)."""
    if not is_loopback(server.host) and server.token is None:
        raise CodecServerRefused(
            f"CODEC_SERVER_HOST={server.host} is beyond loopback: set CODEC_SERVER_TOKEN first, "
            "since whoever reaches the codec server reads every conversation"
        )
    origins = allowed_origins(server, temporal)
    app = codec_app(AesGcmCodec(keys), temporal.namespace, origins, server.token)
    runner = http_edge.runner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, server.host, server.port).start()
        print(
            f"Codec server on http://{server.host}:{server.port} for namespace "
            f"{temporal.namespace!r} (keys {', '.join(k.key_id for k in keys)}; "
            f"{'bearer token required' if server.token else 'no token'}; "
            f"browser origins {', '.join(sorted(origins))})",
            flush=True,
        )
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()

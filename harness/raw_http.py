"""HTTP/1.1 as bytes, for what no HTTP client will send: header bytes that are not UTF-8, broken
framing, garbage. One request per connection, its status read back.

    raw_request(method, path, headers, body) -> bytes -> exchange(port, bytes) -> status (or None)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

# How long a server may take to answer one request before the exchange gives up on it.
ANSWER_TIMEOUT = 10.0


def raw_request(
    method: bytes,
    path: bytes,
    headers: Sequence[tuple[bytes, bytes]],
    body: bytes = b"",
    *,
    content_length: bool = True,
) -> bytes:
    """A request as sent: `Host` and (unless told not to) `Content-Length` added, then `headers`
    in order, `Connection: close` last."""
    lines = [method + b" " + path + b" HTTP/1.1", b"Host: 127.0.0.1"]
    if content_length:
        lines.append(b"Content-Length: %d" % len(body))
    lines += [name + b": " + value for name, value in headers]
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def exchange(port: int, request: bytes, *, then_eof: bool = False) -> int | None:
    """Send `request` to 127.0.0.1:`port` as it is; the status of the answer, or None when the
    server closed the connection without one. `then_eof`: say nothing more comes, for bytes that
    may be a request cut short (a server may then close rather than answer, as aiohttp does)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
            if then_eof:
                writer.write_eof()
        line = await asyncio.wait_for(reader.readline(), ANSWER_TIMEOUT)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    parts = line.split()
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None

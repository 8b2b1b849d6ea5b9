"""A load generator's HTTP/1.1: pre-built requests on keep-alive connections, timed to the byte.

    build_request(...) -> bytes  ;  Connection.send(bytes) -> (status, seconds to the last byte)

For measuring a server's latency with many requests in flight, the client's own cost per request
must be small next to the server's: aiohttp's client spends a few hundred microseconds on each
request and response, so with 100 in flight the last request's figure would be mostly the client's
queue. Here a request is one write of bytes built beforehand, and a response is read as far as its
status line, headers and Content-Length body: tens of microseconds. Only what the benchmarks'
servers send is understood (a Content-Length body, no chunked encoding).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping


def build_request(
    host: str, port: int, path: str, body: bytes, headers: Mapping[str, str]
) -> bytes:
    head = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", f"Content-Length: {len(body)}"]
    head += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Connection:
    """One keep-alive connection; one request in flight on it at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        return cls(*await asyncio.open_connection(host, port))

    async def send(self, request: bytes) -> tuple[int, float]:
        """Send one request; its status and the seconds from the write to the response's end."""
        started = time.perf_counter()
        self._writer.write(request)
        status_line = await self._reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        length = 0
        while (line := await self._reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"transfer-encoding":
                raise ValueError("chunked responses are not understood here")
        if length:
            await self._reader.readexactly(length)
        return status, time.perf_counter() - started

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()

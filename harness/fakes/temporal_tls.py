"""Temporal behind TLS, as Temporal Cloud is reached: a TLS-terminating proxy in front of a dev
server, which reads the API key each client sends.

    client (TEMPORAL_API_KEY: TLS, `authorization: Bearer <key>`) -> this proxy (TLS with a
        certificate of its own CA: SSL_CERT_FILE=ca_file) -> the dev server (plaintext, no auth)

The dev server speaks no TLS and asks for no key, and a client given an API key always uses TLS
(agent.temporal_client), so a test that sets TEMPORAL_API_KEY puts this in between. The bytes go
both ways untouched; on the way in, the HTTP/2 header blocks are decoded (HPACK, one decoder per
connection, as the server keeps one) so a test can see which keys reached "Temporal":

    async with TemporalTLSProxy(dev_server_address) as proxy:
        env = {"TEMPORAL_ADDRESS": proxy.address, "SSL_CERT_FILE": str(proxy.ca_file), ...}
        ...
        assert proxy.api_keys == {key}
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
import tempfile
from pathlib import Path
from types import TracebackType

import hpack
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_HEADERS, _CONTINUATION = 0x1, 0x9
_END_HEADERS, _PADDED, _PRIORITY = 0x4, 0x8, 0x20


class TemporalTLSProxy:
    """TLS on `localhost:<port>` in front of `upstream` (host:port, plaintext gRPC)."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self._dir = Path(tempfile.mkdtemp(prefix="temporal-tls-"))
        self.ca_file = self._dir / "ca.pem"
        self.api_keys: set[str] = set()  # every `authorization: Bearer …` a client sent
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        assert self._server is not None, "not started"
        return f"localhost:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> TemporalTLSProxy:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*self._certificates())
        context.set_alpn_protocols(["h2"])
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=context)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    def _certificates(self) -> tuple[Path, Path]:
        """A CA (written to ca_file, for the clients to trust) and localhost's certificate."""
        now = datetime.datetime.now(datetime.UTC)

        def issue(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, signer, ca):  # type: ignore[no-untyped-def]
            builder = (
                x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                .issuer_name(issuer)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            )
            if not ca:
                names = x509.SubjectAlternativeName([x509.DNSName("localhost")])
                builder = builder.add_extension(names, critical=False)
            return builder.sign(signer, hashes.SHA256())

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "refund-bot test CA")])
        ca = issue("refund-bot test CA", ca_key, ca_name, ca_key, True)
        key = ec.generate_private_key(ec.SECP256R1())
        leaf = issue("localhost", key, ca_name, ca_key, False)
        self.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        cert_file, key_file = self._dir / "localhost.pem", self._dir / "localhost.key"
        cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_file, key_file

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        headers = _HeaderReader(self.api_keys)
        try:
            await asyncio.gather(
                _pipe(reader, up_writer, headers.feed), _pipe(up_reader, writer, None)
            )
        finally:
            self._tasks.discard(task)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen) -> None:  # type: ignore[no-untyped-def]
    try:
        while data := await reader.read(65536):
            if seen is not None:
                seen(data)
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class _HeaderReader:
    """The client's side of one HTTP/2 connection, read for its header blocks."""

    def __init__(self, api_keys: set[str]) -> None:
        self._api_keys = api_keys
        self._buffer = bytearray()
        self._preface = False
        self._decoder = hpack.Decoder()
        self._block = bytearray()
        self._broken = False

    def feed(self, data: bytes) -> None:
        if self._broken:
            return
        self._buffer.extend(data)
        if not self._preface:
            if len(self._buffer) < len(_PREFACE):
                return
            self._preface = True
            del self._buffer[: len(_PREFACE)]
        while len(self._buffer) >= 9:
            length = int.from_bytes(self._buffer[:3], "big")
            if len(self._buffer) < 9 + length:
                return
            kind, flags = self._buffer[3], self._buffer[4]
            payload = bytes(self._buffer[9 : 9 + length])
            del self._buffer[: 9 + length]
            if kind == _HEADERS:
                if flags & _PADDED:
                    payload = payload[1 : len(payload) - payload[0]]
                if flags & _PRIORITY:
                    payload = payload[5:]
                self._block = bytearray(payload)
            elif kind == _CONTINUATION:
                self._block.extend(payload)
            else:
                continue
            if flags & _END_HEADERS:
                self._decode(bytes(self._block))

    def _decode(self, block: bytes) -> None:
        try:
            headers = self._decoder.decode(block, raw=False)
        except hpack.HPACKError:
            self._broken = True  # out of step with the client: stop reading, keep forwarding
            return
        for name, value in headers:
            if str(name).lower() == "authorization" and str(value).startswith("Bearer "):
                self._api_keys.add(str(value).removeprefix("Bearer "))

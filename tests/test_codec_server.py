"""`refund-bot codec-server`: what the Worker wrote, decrypted for the Temporal CLI and Web UI.

The server runs as the real command (a child process) for the end-to-end checks, and the real
`temporal` CLI is its client there, speaking the codec server protocol the Web UI speaks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from google.protobuf import json_format
from pydantic import SecretStr
from temporalio.api.common.v1 import Payloads
from temporalio.client import Client

from agent.codec import ENCODING, AesGcmCodec, CodecKey
from agent.models import CustomerMessage
from agent.settings import AgentSettings, CodecServerSettings, TemporalSettings
from agent.stores.databases import database_for
from bot.local.thread_store import LocalThreadStore
from harness import free_port
from harness.codec import TEST_KEY, TEST_KEYS
from harness.conditions import wait_for
from harness.conversation import LocalConversation
from harness.fakes.loopback import serve_on_loopback
from harness.inproc import running_worker
from harness.raw_http import exchange, raw_request
from worker.codec_server import allowed_origins, codec_app
from worker.server import temporal_cli_path

TOKEN = "codec-server-test-token"
UI = "http://localhost:8233"
OPENING = "please refund order 1234, the plush python lost an eye"


@pytest.fixture
async def conversation(client: Client, agent_settings: AgentSettings) -> str:
    """A conversation the Worker wrote (encrypted with the tests' key); its Workflow ID."""
    threads = LocalThreadStore(database_for(agent_settings))
    async with running_worker(client, agent_settings, threads) as tq:
        conv = LocalConversation(client, threads, tq)
        handle = await conv.open(OPENING)
        await conv.next_bot_message()
    return handle.id


@contextlib.asynccontextmanager
async def codec_server(
    namespace: str, keys: list[CodecKey] = TEST_KEYS, token: str | None = TOKEN
) -> AsyncIterator[str]:
    app = codec_app(AesGcmCodec(keys), namespace, {UI}, SecretStr(token) if token else None)
    runner, url = await serve_on_loopback(app)
    try:
        yield url
    finally:
        await runner.cleanup()


def as_json(payloads: Payloads) -> dict:
    return json_format.MessageToDict(payloads)


async def signal_payloads(client: Client, workflow_id: str) -> Payloads:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    (opening,) = [
        e.workflow_execution_signaled_event_attributes.input
        for e in history.events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    return opening


async def test_it_decodes_what_the_worker_wrote_and_encodes_back(client, conversation) -> None:
    stored = await signal_payloads(client, conversation)
    assert OPENING.encode() not in stored.SerializeToString()
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Namespace": client.namespace}
    async with codec_server(client.namespace) as url, aiohttp.ClientSession() as http:
        async with http.post(f"{url}/decode", json=as_json(stored), headers=headers) as response:
            assert response.status == 200
            decoded = json_format.ParseDict(await response.json(), Payloads())
        (message,) = client.data_converter.payload_converter.from_payloads(
            list(decoded.payloads), [CustomerMessage]
        )
        assert message.text == OPENING

        async with http.post(f"{url}/encode", json=as_json(decoded), headers=headers) as response:
            assert response.status == 200
            encoded = json_format.ParseDict(await response.json(), Payloads())
        assert encoded.payloads[0].metadata["encryption-key-id"] == TEST_KEY.key_id.encode()
        assert await AesGcmCodec(TEST_KEYS).decode(encoded.payloads) == list(decoded.payloads)


async def test_it_refuses_requests_without_its_token_or_for_another_namespace(client) -> None:
    body = as_json(Payloads())
    async with codec_server(client.namespace) as url, aiohttp.ClientSession() as http:
        for headers, status in (
            ({}, 401),
            ({"Authorization": "Bearer not-the-token"}, 401),
            ({"Authorization": TOKEN}, 401),
            ({"Authorization": f"Bearer {TOKEN}", "X-Namespace": "someone-elses"}, 403),
            ({"Authorization": f"Bearer {TOKEN}", "X-Namespace": client.namespace}, 200),
            ({"Authorization": f"Bearer {TOKEN}"}, 200),
        ):
            async with http.post(f"{url}/decode", json=body, headers=headers) as response:
                assert response.status == status, (headers, await response.text())
                if status == 401:
                    assert response.headers["WWW-Authenticate"].startswith("Bearer")
                    assert TOKEN not in await response.text()
        async with http.post(f"{url}/decode", data=b"not json", headers=headers) as response:
            assert response.status == 400


async def test_it_answers_the_web_ui_cors_preflight(client) -> None:
    preflight = {
        "Origin": UI,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-namespace",
    }
    async with codec_server(client.namespace) as url, aiohttp.ClientSession() as http:
        # No credentials on a preflight, even with a token required.
        async with http.options(f"{url}/decode", headers=preflight) as response:
            assert response.status == 204
            assert response.headers["Access-Control-Allow-Origin"] == UI
            assert "POST" in response.headers["Access-Control-Allow-Methods"]
            allowed = response.headers["Access-Control-Allow-Headers"].lower()
            assert {"content-type", "x-namespace", "authorization"} <= {
                h.strip() for h in allowed.split(",")
            }
        elsewhere = {**preflight, "Origin": "https://evil.example"}
        async with http.options(f"{url}/decode", headers=elsewhere) as response:
            assert response.status == 403
            assert "Access-Control-Allow-Origin" not in response.headers
        # The request that follows the preflight carries the origin back too.
        headers = {"Origin": UI, "Authorization": f"Bearer {TOKEN}"}
        async with http.post(f"{url}/decode", json=as_json(Payloads()), headers=headers) as resp:
            assert resp.status == 200 and resp.headers["Access-Control-Allow-Origin"] == UI


async def test_a_missing_key_is_a_clear_answer_not_a_blank(client, conversation) -> None:
    stored = await signal_payloads(client, conversation)
    other = [CodecKey.generate("other-deployment")]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        codec_server(client.namespace, other) as url,
        aiohttp.ClientSession() as http,
        http.post(f"{url}/decode", json=as_json(stored), headers=headers) as response,
    ):
        assert response.status == 400
        text = (await response.text()).strip()
    assert text.startswith(f"Event History is encrypted with codec key {TEST_KEY.key_id!r}")


def _raw_post(body: bytes, headers: dict[str, bytes]) -> bytes:
    return raw_request(b"POST", b"/decode", [(k.encode(), v) for k, v in headers.items()], body)


async def _raw_status(url: str, request: bytes) -> int | None:
    return await exchange(int(url.rsplit(":", 1)[1]), request)


async def test_a_header_that_is_not_ascii_is_refused_not_a_500() -> None:
    """Reproduces a non-ASCII Authorization header answered 500 before authentication: its
    str.encode() raised on the bytes aiohttp kept as surrogates."""
    body = json.dumps(as_json(Payloads())).encode()
    async with codec_server("default") as url:
        for value in (b"Bearer \xff\xfe", "Bearer tökén".encode(), b"\xc3\x28"):
            assert await _raw_status(url, _raw_post(body, {"Authorization": value})) == 401
        good = _raw_post(body, {"Authorization": f"Bearer {TOKEN}".encode()})
        assert await _raw_status(url, good) == 200


def _short_payload() -> dict:
    meta = {"encoding": ENCODING, "encryption-key-id": TEST_KEY.key_id.encode()}
    return {
        "payloads": [
            {
                "metadata": {k: base64.b64encode(v).decode() for k, v in meta.items()},
                "data": base64.b64encode(b"1234").decode(),
            }
        ]
    }


@pytest.mark.parametrize(
    ("name", "body", "headers"),
    [
        ("gzip that is not gzip", b'{"payloads": []}', {"Content-Encoding": "gzip"}),
        ("deflate that is not deflate", b"xx", {"Content-Encoding": "deflate"}),
        ("bytes that are not UTF-8", b'{"payloads": [{"data": "\xff"}]}', {}),
        (
            "a charset Python does not know",
            b'{"payloads": [{"data": "\xe9"}]}',
            {"Content-Type": "application/json; charset=no-such-charset"},
        ),
        ("latin-1 declared, not UTF-8", b"\xe9", {"Content-Type": "text/plain; charset=latin-1"}),
        ("an encrypted payload of 4 bytes", json.dumps(_short_payload()).encode(), {}),
    ],
)
async def test_a_body_it_cannot_read_is_400_and_one_line(
    name: str, body: bytes, headers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces 500s from a body: a Content-Encoding it does not have, bytes that are not
    UTF-8 or in an unknown charset (request.text() raised), and an encrypted payload of a known
    key id with under 8 bytes of data (AESGCM's ValueError)."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        codec_server("default") as url,
        aiohttp.ClientSession() as http,
        http.post(f"{url}/decode", data=body, headers={**auth, **headers}) as response,
    ):
        assert response.status == 400, (name, await response.text())
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_ui_origins_default_to_the_embedded_web_ui() -> None:
    temporal = TemporalSettings(_env_file=None, ui_port=9999)
    server = CodecServerSettings(_env_file=None)
    assert allowed_origins(server, temporal) == {
        "http://localhost:9999",
        "http://127.0.0.1:9999",
    }
    chosen = CodecServerSettings(_env_file=None, cors_origins="https://ui.example/, http://x:1")
    assert allowed_origins(chosen, temporal) == {"https://ui.example", "http://x:1"}


def payload_data(cli_json: str) -> str:
    """Every payload's data in `temporal workflow show --output json`, base64 undone."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "metadata" in node and isinstance(node.get("data"), str):
                found.append(base64.b64decode(node["data"]).decode(errors="replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    with contextlib.suppress(json.JSONDecodeError):
        walk(json.loads(cli_json))
    return "\n".join(found)


def _env(tmp_path: Path, client: Client, **more: str) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "DATA_DIR": str(tmp_path),
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": client.namespace,
        "CODEC_KEYS": TEST_KEY.entry(),
        **more,
    }


async def test_the_temporal_cli_reads_a_conversation_through_refund_bot_codec_server(
    client, conversation, tmp_path
) -> None:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "refund_bot", "codec-server",
        env=_env(tmp_path, client, CODEC_SERVER_PORT=str(port), CODEC_SERVER_TOKEN=TOKEN),
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip

    async def show(*codec: str) -> tuple[int, str]:
        """`temporal workflow show` as an operator runs it, with or without the codec server."""
        cli = await asyncio.create_subprocess_exec(
            str(temporal_cli_path()), "workflow", "show",
            "--workflow-id", conversation,
            "--address", client.service_client.config.target_host,
            "--namespace", client.namespace,
            "--output", "json",
            *codec,
            env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await cli.communicate()
        return cli.returncode or 0, out.decode()

    async def up() -> bool:
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.post(f"{endpoint}/decode", json={"payloads": []}) as response,
            ):
                return response.status == 401
        except aiohttp.ClientConnectionError:
            return False

    try:
        await wait_for(up, timeout=30, what="refund-bot codec-server answering")
        code, raw = await show()
        assert code == 0, raw
        assert OPENING not in payload_data(raw)
        assert base64.b64encode(ENCODING).decode() in raw
        code, decoded = await show("--codec-endpoint", endpoint, "--codec-auth", f"Bearer {TOKEN}")
        assert code == 0, decoded
        assert OPENING in payload_data(decoded)
        _, refused = await show("--codec-endpoint", endpoint)  # no token: nothing decrypted
        assert OPENING not in refused and OPENING not in payload_data(refused)
    finally:
        server.send_signal(signal.SIGTERM)
        out = (await server.communicate())[0].decode()
    assert server.returncode == 0, out
    assert out.startswith(f"Codec server on {endpoint} for namespace {client.namespace!r}")
    assert TOKEN not in out and TEST_KEY.entry().split(":")[1] not in out


def test_codec_server_refuses_to_listen_beyond_loopback_without_a_token(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "refund_bot", "codec-server"],
        env={
            "PATH": os.environ["PATH"],
            "DATA_DIR": str(tmp_path),
            "CODEC_KEYS": TEST_KEY.entry(),
            "CODEC_SERVER_HOST": "0.0.0.0",
            "CODEC_SERVER_PORT": str(free_port()),
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("refund-bot: codec server not started: CODEC_SERVER_HOST=0.0.0.0")
    assert "CODEC_SERVER_TOKEN" in line

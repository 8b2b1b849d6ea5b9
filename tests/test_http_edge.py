"""HTTP that aiohttp cannot parse, sent to every server refund-bot runs: a 400 and one line each.

Each server is started the way refund-bot starts it (the Slack app in HTTP mode through `serve`,
/healthz and /metrics through `serving_ops`, the codec server through its `serve`), and gets bytes
over a raw socket: a path and a header past aiohttp's limits, a broken chunked body, a header line
with no colon. What is checked is the answer and the log, not the servers' own work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest
from pydantic import SecretStr
from temporalio.runtime import Runtime

from agent.settings import CodecServerSettings, TemporalSettings
from agent.stores.sqlite import SqliteDatabase
from bot.inbox import Inbox
from bot.slack.app import build_app, serve
from harness import free_port, port_accepts
from harness.codec import TEST_KEYS
from harness.conditions import wait_for
from harness.fakes.slack_api import FakeSlackApi
from harness.raw_http import exchange
from harness.recording_router import RecordingRouter
from refund_bot.ops import Ops, serving_ops
from tests.support.slack_app import TEAM, RecordingCommands, settings_for
from worker import codec_server

MALFORMED_HTTP: dict[str, bytes] = {
    "a path past 8 KiB": b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "a header past 8 KiB": b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 10_000 + b"\r\n\r\n",
    "a header line without a colon": b"GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
    "a chunk size that is not hex": (
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"
    ),
    "a request line of garbage": b"\x00\x01\x02 / HTTP/1.1\r\nHost: x\r\n\r\n",
}


@contextlib.asynccontextmanager
async def slack_http(port: int) -> AsyncIterator[None]:
    async with FakeSlackApi(team_id=TEAM) as slack:
        settings = settings_for(slack, port=port)
        app = build_app(settings, RecordingRouter(), RecordingCommands())
        task = asyncio.create_task(serve(app, settings))
        try:
            await wait_for(lambda: port_accepts(port), timeout=10, what="Slack's HTTP port")
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def quick_ops(tmp_path: object) -> Ops:
    """/healthz and /metrics with a Temporal that answers its health check at once."""
    temporal = SimpleNamespace(
        service_client=SimpleNamespace(
            config=SimpleNamespace(target_host="stub:7233"),
            check_health=lambda timeout=None: asyncio.sleep(0, True),
        )
    )
    inbox = Inbox(SqliteDatabase(tmp_path))  # type: ignore[arg-type]
    meter = Runtime.default().metric_meter
    return Ops(temporal, inbox, [], "http://127.0.0.1:1/metrics", meter)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def ops_http(port: int, tmp_path: object) -> AsyncIterator[None]:
    async with serving_ops(f"127.0.0.1:{port}", quick_ops(tmp_path)):
        yield


@contextlib.asynccontextmanager
async def codec_http(port: int) -> AsyncIterator[None]:
    server = CodecServerSettings(_env_file=None, port=port, token=SecretStr("t"))
    temporal = TemporalSettings(_env_file=None)
    task = asyncio.create_task(codec_server.serve(server, TEST_KEYS, temporal))
    try:
        await wait_for(lambda: port_accepts(port), timeout=10, what="the codec server's port")
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize("server", ["slack", "ops", "codec"])
async def test_malformed_http_is_400_and_one_warning_line_on_every_server(
    server: str, tmp_path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reproduces aiohttp logging each malformed request it refused with a 400 at ERROR, with a
    traceback: anyone who reaches a port could fill the log with them."""
    port = free_port()
    serving = {
        "slack": lambda: slack_http(port),
        "ops": lambda: ops_http(port, tmp_path),
        "codec": lambda: codec_http(port),
    }[server]
    async with serving():
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="aiohttp"):
            for name, request in MALFORMED_HTTP.items():
                assert await exchange(port, request) == 400, name
    refusals = [r for r in caplog.records if r.name.startswith("aiohttp")]
    assert len(refusals) == len(MALFORMED_HTTP), [r.getMessage() for r in refusals]
    for record in refusals:
        # Raw garbage as a connection's first request is aiohttp's debug line (port scanners).
        assert record.levelno <= logging.WARNING and record.exc_info is None, record.getMessage()
        assert "\n" not in record.getMessage() and len(record.getMessage()) < 300

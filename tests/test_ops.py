"""The bot process's /healthz and /metrics (refund_bot/ops.py), served for real over HTTP.

/healthz: Temporal answers, every platform connected or on standby, inbox readable -> 200
          a platform retrying or down, or Temporal unreachable -> 503, the JSON says which
/metrics: the Runtime's Prometheus exporter, with the inbox depth and platforms set at the
          scrape and the SDK's own metrics of a client on that Runtime
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.testing import WorkflowEnvironment

from agent.models import Actor, ThreadRef
from agent.stores.sqlite import SqliteDatabase
from bot.conversations import InboundMessage
from bot.inbox import Inbox
from bot.platform_health import PlatformHealth
from harness import free_port
from refund_bot.ops import Ops, OpsRefused, serving_ops


@asynccontextmanager
async def served(ops: Ops) -> AsyncIterator[str]:
    address = f"127.0.0.1:{free_port()}"
    async with serving_ops(address, ops):
        yield f"http://{address}"


async def get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        body = await resp.json() if resp.content_type == "application/json" else await resp.text()
        return resp.status, body


def platforms() -> list[PlatformHealth]:
    slack, discord = PlatformHealth("slack"), PlatformHealth("discord")
    slack.connected()
    discord.standby("gateway held by pid 4242 on bot-1")
    return [slack, discord]


async def test_healthz_is_200_when_every_part_does_its_job_and_503_naming_the_one_that_does_not(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    healths = platforms()
    inbox = Inbox(SqliteDatabase(tmp_path))
    ops = Ops(
        temporal_env.client,
        inbox,
        healths,
        "http://127.0.0.1:1/metrics",
        Runtime.default().metric_meter,
    )
    async with served(ops) as url:
        status, body = await get(url + "/healthz")
        assert status == 200 and body["status"] == "ok"
        assert body["temporal"]["ok"] is True
        assert body["platforms"]["slack"]["state"] == "connected"
        assert body["platforms"]["discord"] == {
            "state": "standby",
            "ready": True,  # another replica holds Discord's one gateway: this one is fine
            "since": round(healths[1].since),
            "detail": "gateway held by pid 4242 on bot-1",
        }
        assert body["inbox"] == {"ok": True, "waiting": 0, "dead": 0}

        healths[0].retrying("ClientConnectorError: Cannot connect to host slack.com:443")
        status, body = await get(url + "/healthz")
        assert status == 503 and body["status"] == "unavailable"
        assert body["platforms"]["slack"]["ready"] is False
        assert body["platforms"]["slack"]["detail"].startswith("ClientConnectorError")


async def test_healthz_is_503_while_temporal_is_unreachable(tmp_path: Path) -> None:
    nowhere = await Client.connect(f"127.0.0.1:{free_port()}", lazy=True)
    ops = Ops(
        nowhere, Inbox(SqliteDatabase(tmp_path)), platforms(), "", Runtime.default().metric_meter
    )
    async with served(ops) as url:
        status, body = await get(url + "/healthz")
    assert status == 503 and body["temporal"]["ok"] is False and body["temporal"]["detail"]
    assert body["platforms"]["slack"]["ready"] is True


async def test_metrics_are_the_runtimes_exporter_with_the_bots_gauges_set_at_the_scrape(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    exporter = f"127.0.0.1:{free_port()}"
    # A Runtime of its own, as a bot process has (worker.telemetry installs it as the default).
    runtime = Runtime(
        telemetry=TelemetryConfig(
            metrics=PrometheusConfig(bind_address=exporter, counters_total_suffix=True)
        )
    )
    target = temporal_env.client.service_client.config.target_host
    client = await Client.connect(target, runtime=runtime)
    await client.count_workflows()  # one RPC: the SDK counts it
    inbox = Inbox(SqliteDatabase(tmp_path))
    thread = ThreadRef(platform="slack", workspace="T1", channel="C1", thread="1.0")
    waiting = InboundMessage(
        event_id="e1",
        thread=thread,
        message_id="m1",
        author=Actor(platform="slack", user_id="U1"),
        text="hi",
        opens_thread=False,
    )
    await inbox.put("message", waiting, "slack-T1-C1-1.0")
    ops = Ops(client, inbox, platforms(), f"http://{exporter}/metrics", runtime.metric_meter)
    async with served(ops) as url:
        status, text = await get(url + "/metrics")
    assert status == 200
    lines = text.splitlines()
    assert "# TYPE refund_bot_inbox_depth gauge" in lines
    assert any(line.startswith("refund_bot_inbox_depth{") and line.endswith(" 1") for line in lines)
    connected = [line for line in lines if line.startswith("refund_bot_platform_connected{")]
    assert len(connected) == 2 and all(line.endswith(" 1") for line in connected)
    # The SDK's own: the RPC above, by operation.
    assert any(
        line.startswith("temporal_request_total{") and 'operation="CountWorkflowExecutions"' in line
        for line in lines
    ), text


async def test_an_address_in_use_is_one_line(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    ops = Ops(
        temporal_env.client, Inbox(SqliteDatabase(tmp_path)), [], "", Runtime.default().metric_meter
    )
    address = f"127.0.0.1:{free_port()}"
    async with serving_ops(address, ops):
        with pytest.raises(OpsRefused, match=f"METRICS_ADDRESS={address}"):
            async with serving_ops(address, ops):
                pass


async def test_metrics_without_its_exporter_is_503_and_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces /metrics answering 500, with a traceback per scrape, when the exporter it
    serves does not answer."""
    nowhere = await Client.connect(f"127.0.0.1:{free_port()}", lazy=True)
    exporter = f"http://127.0.0.1:{free_port()}/metrics"
    ops = Ops(
        nowhere, Inbox(SqliteDatabase(tmp_path)), [], exporter, Runtime.default().metric_meter
    )
    async with served(ops) as url:
        status, text = await get(url + "/metrics")
    assert status == 503 and "exporter" in text
    (line,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert line.exc_info is None and exporter in line.getMessage()

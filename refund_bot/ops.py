"""The bot process's /healthz and /metrics (`refund-bot bot`, `refund-bot run`), at METRICS_ADDRESS.

    GET /healthz -> Temporal's health check, each platform's PlatformHealth, the inbox
                 -> 200 when all are well, else 503; a JSON body says which part is not
    GET /metrics -> inbox depth, dead letters, platforms connected, Workers polling (alive by
                    their heartbeats) and escalations waiting (refund_bot/escalations.py), set now
                 -> this process's exporter (worker/telemetry: the SDK's metrics and refund-bot's)

A load balancer asks /healthz whether to send Slack's requests here; Prometheus scrapes /metrics.
A platform on standby (another replica holds Discord's gateway) counts as well: this replica is
doing its part. Nothing here ever shows a secret: health details are the adapters' one-line
reasons, which never carry one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import aiohttp
from aiohttp import web
from temporalio.client import Client
from temporalio.common import MetricMeter

from agent import http_edge
from bot.conversations import OPENED, OPENED_DESCRIPTION
from bot.inbox import Inbox
from bot.platform_health import PlatformHealth
from bot.reconnect import one_line
from refund_bot.escalations import EscalationWatch
from worker.pollers import other_workers
from worker.settings import parse_address
from worker.telemetry import PREFIX

log = logging.getLogger(__name__)

# A health check answers within a load balancer's patience even when Temporal does not.
TEMPORAL_CHECK_TIMEOUT = timedelta(seconds=2)


class OpsRefused(Exception):
    """The address cannot be listened on: one line, like every setting's mistake."""


@dataclass
class Ops:
    """What /healthz and /metrics read: all of it live, at each request."""

    client: Client
    inbox: Inbox
    platforms: Sequence[PlatformHealth]
    exporter: str  # this process's SDK exporter (worker.telemetry.install_metrics_on_loopback)
    meter: MetricMeter  # that exporter's Runtime's (worker.telemetry.metric_meter)
    # The conversations' task queue: the Workers polling it and the escalations waiting are read
    # from Temporal at each scrape (None: neither is reported).
    task_queue: str | None = None


async def _temporal(client: Client) -> dict[str, Any]:
    address = client.service_client.config.target_host
    try:
        async with asyncio.timeout(TEMPORAL_CHECK_TIMEOUT.total_seconds() + 1):
            ok = await client.service_client.check_health(timeout=TEMPORAL_CHECK_TIMEOUT)
        detail = "" if ok else "its health check says not serving"
    except Exception as err:  # refused, timed out: unreachable for now
        ok, detail = False, one_line(err)
    return {"address": address, "ok": ok, "detail": detail}


async def health(ops: Ops) -> tuple[bool, dict[str, Any]]:
    """Whether this process can do its job now, and the parts of that answer."""
    temporal = await _temporal(ops.client)
    platforms = {
        p.name: {"state": p.state, "ready": p.ready, "since": round(p.since), "detail": p.detail}
        for p in ops.platforms
    }
    try:
        depth = await ops.inbox.depth()
        inbox: dict[str, Any] = {"ok": True, "waiting": depth.waiting, "dead": depth.dead}
    except Exception as err:  # a message that cannot be kept would be lost: not healthy
        inbox = {"ok": False, "detail": one_line(err)}
    ok = temporal["ok"] and inbox["ok"] and all(p["ready"] for p in platforms.values())
    body = {"status": "ok" if ok else "unavailable", "time": round(time.time())}
    return ok, {**body, "temporal": temporal, "platforms": platforms, "inbox": inbox}


def ops_app(ops: Ops) -> web.Application:
    meter = ops.meter
    inbox_depth = meter.create_gauge(
        PREFIX + "inbox_depth", "Messages waiting in the inbox to be delivered to Temporal"
    )
    dead_letters = meter.create_gauge(
        PREFIX + "inbox_dead_letters", "Messages kept in the inbox that will not be delivered"
    )
    connected = meter.create_gauge(
        PREFIX + "platform_connected", "1 when the chat platform is connected (or on standby)"
    )
    polling = meter.create_gauge(
        PREFIX + "workers_polling",
        "Worker processes alive on the conversations' task queue (their heartbeats to Temporal)",
    )
    escalations_waiting = meter.create_gauge(
        PREFIX + "escalations_waiting", "Escalations posted and not yet answered by a support agent"
    )
    oldest_escalation = meter.create_gauge(
        PREFIX + "escalation_oldest_age_seconds",
        "How long the oldest unanswered escalation has waited (0 when none waits)",
    )
    reminded_gauge = meter.create_gauge(
        PREFIX + "escalations_reminded",
        "Escalations still waiting after their approvers were reminded in the thread",
    )
    watch = EscalationWatch(ops.client)
    # At 0 from the start for each platform served (the router counts from 1): a series that
    # first appears at 1 hides that conversation from rate() and increase().
    opened = meter.create_counter(OPENED, OPENED_DESCRIPTION)
    for platform in ops.platforms:
        opened.add(0, {"platform": platform.name})

    async def from_temporal() -> None:
        # Temporal unreachable: the gauges keep their last value; /healthz says why.
        task_queue = ops.task_queue
        if task_queue is None:
            return
        with contextlib.suppress(Exception):
            workers = await other_workers(ops.client, ops.client.namespace, task_queue)
            polling.set(len(workers), {"task_queue": task_queue})
        with contextlib.suppress(Exception):
            waiting = await watch.waiting()
            escalations_waiting.set(waiting.count)
            oldest_escalation.set(round(waiting.oldest_seconds))
            reminded_gauge.set(waiting.reminded)

    async def healthz(_: web.Request) -> web.Response:
        ok, body = await health(ops)
        return web.json_response(body, status=200 if ok else 503)

    async def metrics(_: web.Request) -> web.Response:
        # Gauges of state read now, then the exporter's whole text with them in it.
        with contextlib.suppress(Exception):  # an unreadable inbox is /healthz's to report
            depth = await ops.inbox.depth()
            inbox_depth.set(depth.waiting)
            dead_letters.set(depth.dead)
        for platform in ops.platforms:
            connected.set(int(platform.ready), {"platform": platform.name})
        await from_temporal()
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.get(ops.exporter, timeout=aiohttp.ClientTimeout(total=5)) as resp,
            ):
                resp.raise_for_status()
                text = await resp.text()
        except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError) as err:
            # Not the scraper's mistake, and no traceback per scrape: one line, and a 503 it
            # can tell from an empty page.
            log.warning(
                "/metrics: the exporter at %s did not answer (%s)", ops.exporter, one_line(err)
            )
            return web.Response(status=503, text="the metrics exporter did not answer\n")
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app


@contextlib.asynccontextmanager
async def serving_ops(address: str, ops: Ops) -> AsyncIterator[None]:
    """Serve /healthz and /metrics at `address` (host:port) while inside."""
    host, port = parse_address(address)
    runner = http_edge.runner(ops_app(ops))
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as err:
            raise OpsRefused(
                f"cannot serve /healthz and /metrics at METRICS_ADDRESS={address} "
                f"({err.strerror or err}): free the port, set another address, or set it to off"
            ) from None
        log.info("/healthz and /metrics on http://%s", address)
        yield
    finally:
        await runner.cleanup()

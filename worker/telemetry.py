"""Metrics of one process: the Temporal SDK's Runtime with its Prometheus exporter, set up first.

    install_metrics(address) -> Runtime(PrometheusConfig) -> Runtime.set_default
        -> every Client and Worker of this process reports there, and so do refund-bot's own
           counters (an Activity's activity.metric_meter(), the bot's metric_meter())

The SDK's own metrics (requests, long polls, workflow and activity task latencies, sticky cache,
slots) and refund-bot's counters come out of one exporter per process, in Prometheus text format.
A `refund-bot worker` serves it at WORKER_METRICS_ADDRESS itself; the bot process serves it behind
its own /metrics, beside /healthz (refund_bot/ops.py).
"""

from __future__ import annotations

import socket

from temporalio.common import MetricMeter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from agent.temporal_client import heartbeating_runtime
from worker.conversation_metrics import TURN_BUCKETS, TURN_METRIC

# refund-bot's own metrics, one prefix: refund_bot_<name>, counters with Prometheus' _total.
PREFIX = "refund_bot_"


class MetricsRefused(Exception):
    """The exporter could not listen where it was told (the port is taken, say)."""


def install_metrics(bind_address: str) -> Runtime:
    """Serve this process's metrics at `bind_address` (host:port, GET /metrics) from now on.

    Call it before any Temporal client connects: clients and Workers report to the Runtime that
    was the default when they were made.
    """
    runtime = prometheus_runtime(bind_address)
    Runtime.set_default(runtime, error_if_already_set=False)
    return runtime


def prometheus_runtime(bind_address: str) -> Runtime:
    """A Runtime exporting at `bind_address`, as every refund-bot process's is configured."""
    config = PrometheusConfig(
        bind_address=bind_address,
        counters_total_suffix=True,  # Prometheus' convention: refund_bot_refunds_issued_total
        durations_as_seconds=True,
        histogram_bucket_overrides={TURN_METRIC: TURN_BUCKETS},
    )
    try:
        # Its Workers heartbeat as every refund-bot process's do (agent.temporal_client).
        return heartbeating_runtime(TelemetryConfig(metrics=config))
    except ValueError as err:  # "Failed starting Prometheus exporter: Address already in use"
        raise MetricsRefused(f"cannot serve metrics at {bind_address}: {err}") from None


def metric_meter() -> MetricMeter:
    """This process's meter: a no-op one unless install_metrics ran."""
    return Runtime.default().metric_meter


def install_metrics_on_loopback(tries: int = 3) -> str:
    """install_metrics on a free loopback port, for a process that serves /metrics itself in
    front of it (refund_bot/ops.py); returns the exporter's URL."""
    for attempt in range(tries):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        try:
            install_metrics(f"127.0.0.1:{port}")
        except MetricsRefused:  # taken between the probe and the bind: another port
            if attempt == tries - 1:
                raise
            continue
        return f"http://127.0.0.1:{port}/metrics"
    raise AssertionError("unreachable")

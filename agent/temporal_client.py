"""One way to connect to Temporal, for the bot, the Worker, the supervisor, the commands and tests.

    settings -> codec_keys -> data_converter(keys) -> Client.connect (+ tracing, when on)
        on process_runtime(): every Worker of the process heartbeats to Temporal every second

The data converter is built here and nowhere else: pydantic values (agent.models), encrypted by
the AES-GCM payload codec (agent.codec), and failure messages and stack traces moved into an
encoded payload, so an ApplicationError's message is encrypted like any other value. With tracing
on (agent.tracing), the client carries each call's trace context in Temporal's headers, and so
does every Worker built on it.

Every client is made on this process's Runtime, whose Workers send Temporal a heartbeat every
WORKER_HEARTBEAT (the SDK's default is a minute). Temporal keeps listing a poller for a minute or
more after its process died; a heartbeat a few seconds old says the process is alive now, on any
host, and that is what worker.pollers reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import timedelta

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.service import TLSConfig

from agent import tracing
from agent.codec import AesGcmCodec, CodecKey
from agent.codec_keys import codec_keys
from agent.settings import AgentSettings, TemporalSettings

# How often each Worker tells Temporal it is alive (the SDK allows 1 s to 60 s). One small request
# a second per process; a host lost is seen as gone within a few seconds (worker.pollers).
WORKER_HEARTBEAT = timedelta(seconds=1)
# The Runtimes made here, so a default set by someone else (the SDK's own, heartbeating once a
# minute) is recognised and replaced.
_heartbeating: list[Runtime] = []


def heartbeating_runtime(telemetry: TelemetryConfig | None = None) -> Runtime:
    """A Runtime whose Workers heartbeat every WORKER_HEARTBEAT (worker.telemetry adds metrics)."""
    runtime = Runtime(
        telemetry=telemetry or TelemetryConfig(), worker_heartbeat_interval=WORKER_HEARTBEAT
    )
    _heartbeating.append(runtime)
    return runtime


def process_runtime() -> Runtime:
    """This process's Runtime: the default one when it heartbeats (the metrics Runtime
    worker.telemetry installs, say), otherwise a heartbeating one, made the default now."""
    if _heartbeating:
        current = Runtime.default()
        if any(current is ours for ours in _heartbeating):
            return current
    runtime = heartbeating_runtime()
    Runtime.set_default(runtime, error_if_already_set=False)
    return runtime


def data_converter(keys: Sequence[CodecKey]) -> DataConverter:
    """The converter every client and Worker uses; `keys[0]` encrypts, every key decrypts."""
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=AesGcmCodec(keys),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def tls_config(settings: TemporalSettings) -> TLSConfig | bool:
    if settings.tls_cert_path and settings.tls_key_path:
        return TLSConfig(
            client_cert=settings.tls_cert_path.read_bytes(),
            client_private_key=settings.tls_key_path.read_bytes(),
        )
    # An API key (Temporal Cloud) always travels over TLS.
    return bool(settings.tls or settings.api_key)


async def connect(
    settings: TemporalSettings | None = None,
    *,
    address: str | None = None,
    keys: Sequence[CodecKey] | None = None,
) -> Client:
    """`keys` default to the configured ones (CODEC_KEYS, or DATA_DIR/codec.key)."""
    settings = settings or TemporalSettings()
    return await Client.connect(
        address or settings.address,
        namespace=settings.namespace,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        tls=tls_config(settings),
        data_converter=data_converter(codec_keys(AgentSettings()) if keys is None else keys),
        interceptors=tracing.interceptors(),
        runtime=process_runtime(),
    )

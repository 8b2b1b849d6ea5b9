"""One way to connect to Temporal, for the bot, the Worker, the supervisor, the commands and tests.

    settings -> codec_keys -> data_converter(keys) -> Client.connect (+ tracing, when on)
        on process_runtime(): every Worker of the process heartbeats to Temporal every second

The data converter is built here and nowhere else: pydantic values (agent.models), encrypted by
the AES-GCM payload codec (agent.codec), and failure messages and stack traces moved into an
encoded payload, so an ApplicationError's message is encrypted like any other value. Its pydantic
JSON converter is made once per process (OnePydanticConverter): the SDK makes a payload converter
for every conversation it runs and two for every activation. With tracing on (agent.tracing), the
client carries each call's trace context in Temporal's headers, and so does every Worker built on
it.

Every client is made on this process's Runtime, whose Workers send Temporal a heartbeat every
WORKER_HEARTBEAT (the SDK's default is a minute). Temporal keeps listing a poller for a minute or
more after its process died; a heartbeat a few seconds old says the process is alive now, on any
host, and that is what worker.pollers reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)
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


# The SDK's pydantic JSON converter keeps a pydantic TypeAdapter for each type it has decoded, and
# building one costs 0.1-0.6 ms. Shared by every payload converter of the process, each type's is
# built once, not once for each conversation the Worker runs or replays.
_PYDANTIC_JSON = PydanticJSONPlainPayloadConverter()


class OnePydanticConverter(CompositePayloadConverter):
    """temporalio.contrib.pydantic's PydanticPayloadConverter, its JSON converter made once.

    The SDK calls the payload converter class for every workflow instance and twice for every
    activation (temporalio 1.35); each PydanticPayloadConverter built its own schema serializer
    and an empty TypeAdapter cache. The converter is stateless apart from that cache, which is
    thread-safe (functools.lru_cache), so one serves every workflow thread. The cache is keyed by
    type and bounded (1,024): the types decoded are agent.models', passed through the sandbox, so
    every conversation finds the same ones."""

    def __init__(self) -> None:
        super().__init__(
            *(
                _PYDANTIC_JSON if isinstance(converter, JSONPlainPayloadConverter) else converter
                for converter in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


def data_converter(keys: Sequence[CodecKey]) -> DataConverter:
    """The converter every client and Worker uses; `keys[0]` encrypts, every key decrypts."""
    return DataConverter(
        payload_converter_class=OnePydanticConverter,
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

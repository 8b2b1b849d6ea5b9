"""One way to connect to Temporal, for the bot, the Worker, the supervisor, the commands and tests.

    settings -> codec_keys -> data_converter(keys) -> Client.connect (+ tracing, when on)

The data converter is built here and nowhere else: pydantic values (agent.models), encrypted by
the AES-GCM payload codec (agent.codec), and failure messages and stack traces moved into an
encoded payload, so an ApplicationError's message is encrypted like any other value. With tracing
on (agent.tracing), the client carries each call's trace context in Temporal's headers, and so
does every Worker built on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes
from temporalio.service import TLSConfig

from agent import tracing
from agent.codec import AesGcmCodec, CodecKey
from agent.codec_keys import codec_keys
from agent.settings import AgentSettings, TemporalSettings


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
    )

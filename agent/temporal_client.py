"""One way to connect to Temporal, for the bot, the Worker, the supervisor and the tests."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import TLSConfig

from agent.settings import TemporalSettings

# Every value that crosses history is a pydantic model (agent.models).
DATA_CONVERTER = pydantic_data_converter


def tls_config(settings: TemporalSettings) -> TLSConfig | bool:
    if settings.tls_cert_path and settings.tls_key_path:
        return TLSConfig(
            client_cert=settings.tls_cert_path.read_bytes(),
            client_private_key=settings.tls_key_path.read_bytes(),
        )
    # An API key (Temporal Cloud) always travels over TLS.
    return bool(settings.tls or settings.api_key)


async def connect(
    settings: TemporalSettings | None = None, *, address: str | None = None
) -> Client:
    settings = settings or TemporalSettings()
    return await Client.connect(
        address or settings.address,
        namespace=settings.namespace,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        tls=tls_config(settings),
        data_converter=DATA_CONVERTER,
    )

"""One way to talk to Stripe: test mode only, SDK retries off, the HTTP session closed after use."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from agent.settings import AgentSettings

if TYPE_CHECKING:
    import stripe


@contextlib.asynccontextmanager
async def stripe_client(settings: AgentSettings) -> AsyncIterator[stripe.StripeClient]:
    if settings.stripe_api_key is None:
        raise RuntimeError("STRIPE_API_KEY is not set: the offline ledger owns the effect")
    import stripe  # here: an offline Worker never pays its import time (about a second)

    http = stripe.AIOHTTPClient()
    client = stripe.StripeClient(
        settings.stripe_api_key.get_secret_value(),
        # Temporal owns every retry; a hidden SDK retry would not show in Event History.
        max_network_retries=0,
        base_addresses={"api": settings.stripe_api_base} if settings.stripe_api_base else None,
        http_client=http,
    )
    try:
        yield client
    finally:
        await http.close_async()

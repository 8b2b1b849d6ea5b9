"""Kept-alive connections to Slack's Web API.

    first call -> one aiohttp session, opened in the running loop -> every later call reuses it

slack_sdk's AsyncWebClient, given no session, opens one for each call and closes it after: a TCP
connect and a TLS handshake per call, two extra round trips to Slack on every one. A post into a
thread is two calls (the read for an earlier attempt, then chat.postMessage), and the live
authorization read before a refund is another. bench.slack_post measures the difference.

The session is opened by the first call, not by the constructor, so a client can be built before
its event loop runs; `close()` ends it with the process. A call after `close()` still works, on a
session of its own (the SDK's behaviour when it has none).

A connection Slack closed while it was idle is not reused: aiohttp drops it from the pool (and
closes its own idle ones after 15 s, sooner than a load balancer's idle timeout). One that closes
just as a call goes out fails that call with a connection error, as a new connection can: the
caller's retry covers it (Temporal's, for the Worker's posts, whose read for an earlier attempt
makes a repeat safe).
"""

from __future__ import annotations

from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse


class KeptAliveWebClient(AsyncWebClient):
    """An AsyncWebClient whose calls share one session (and so its connections).

    The session's own timeout bounds every call (the SDK uses it in place of `timeout` once it has
    a session). Bolt's per-request clients share the app client's session once it is open; the app
    opens it with its first call, auth.test, before it serves a request.
    """

    _closed = False

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        if self.session is None and not self._closed:
            # EXECUTION STATE: the kept-alive connections, until close()
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        return await super().api_call(api_method, **kwargs)

    async def close(self) -> None:
        self._closed = True  # never opened again: nothing would close it
        if self.session is not None:
            await self.session.close()

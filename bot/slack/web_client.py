"""Kept-alive connections to Slack's Web API.

    first call -> one aiohttp session, opened in the running loop -> every later call reuses it

slack_sdk's AsyncWebClient, given no session, opens one per call: a TCP connect and a TLS
handshake each time, and a post into a thread is two calls (bench.slack_post measures it). A
connection Slack closed while idle is not reused; one that closes as a call goes out fails that
call, which the caller's retry covers (the post reads for an earlier attempt first).
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

"""A local stand-in for OpenAI's Responses API, for the real openai SDK.

Its "model" is a script: it looks at the observations in the request and calls the next lookup,
then submits a decision. It records every request and can answer the next N with HTTP 500.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.loopback import LoopbackFake


@dataclass
class FakeOpenAI(LoopbackFake):
    """`url` is the server's base; the SDK's base_url is `api_url` (with /v1)."""

    api_key: str = "sk-fake-openai"
    decision: str = "approve"
    requests: list[dict[str, Any]] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self._responses)

    @property
    def api_url(self) -> str:
        return f"{self.url}/v1"

    def _next_call(self, observations: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        done = {o["kind"] for o in observations}
        for tool in ("lookup_order", "lookup_customer_history"):
            if tool not in done:
                return tool, {}
        return "submit_decision", {"outcome": self.decision, "rationale": "scripted decision"}

    async def _responses(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            error = {"message": "Incorrect API key provided", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=401)
        if self.take_failure():
            error = {"message": "The server had an error", "type": "server_error"}
            return web.json_response({"error": error}, status=500)
        name, args = self._next_call(json.loads(body["input"])["observations"])
        n = next(self._ids)
        return web.json_response(
            {
                "id": f"resp_{n}",
                "object": "response",
                "created_at": int(time.time()),
                "status": "completed",
                "model": body["model"],
                "output": [
                    {
                        "type": "function_call",
                        "id": f"fc_{n}",
                        "call_id": f"call_{n}",
                        "name": name,
                        "arguments": json.dumps(args),
                        "status": "completed",
                    }
                ],
                "parallel_tool_calls": False,
                "tool_choice": "required",
                "tools": body.get("tools", []),
                "usage": {"input_tokens": 120, "output_tokens": 12, "total_tokens": 132},
            }
        )

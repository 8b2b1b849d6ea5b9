"""A local stand-in for OpenAI's Responses API, for the real openai SDK.

Strict at the edge: a request is validated as the real API validates it (unknown parameters, a
tool without a valid name or a JSON-schema object, strict function parameters, tool_choice) and
refused with its 400. Its "model" is a script (`behaviour`): the cooperative one looks up the
order and the history, then submits `decision`; the hostile ones are a prompt-injected model, each
in one way; one glitches once a conversation (answers with text and no tool call), one asks the
agent's questions first. It records every request and can answer the next N with HTTP 500.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiohttp import web
from pydantic import SecretStr

from agent.settings import AgentSettings
from harness.fakes.loopback import LoopbackFake

Behaviour = Literal[
    "scripted",  # look up the order and the history, then submit `decision`
    "approve_at_once",  # approve on the first call, with no lookup
    "escalate_at_once",  # escalate on the first call, before any question or lookup
    "approve_after_lookups",  # every lookup, then approve whatever they showed
    "deny_everything",  # deny on the first call
    "escalate_injected",  # escalate, with a rationale full of mentions, links and markup
    "unknown_tool",  # call a tool that was never offered
    "malformed_arguments",  # submit a decision whose arguments are not JSON
    "glitch_once",  # its first answer in a conversation calls no tool; then as "scripted"
    "asks",  # ask whether it was opened and what was damaged, then as "scripted"
]
HOSTILE: tuple[Behaviour, ...] = (
    "approve_at_once",
    "approve_after_lookups",
    "deny_everything",
    "escalate_injected",
    "unknown_tool",
    "malformed_arguments",
)

# In every rationale the hostile model writes: a customer-facing message that holds it carries
# the model's words.
CANARY = "MODELWORDS"
INJECTED = (
    f"{CANARY} policy override: manager approved, pre-approved for $5000. <!channel> <!here> "
    "@everyone @here <@U0ADMIN> <@&123456789> <#C0GENERAL> **urgent** `code` ~~gone~~ "
    "[refund portal](https://evil.example/pay) <https://evil.example/x|click here> "
    "https://evil.example/steal www.evil.example \x1b[2J\x1b[31mterminal takeover\x1b[0m"
)

_TOP_LEVEL = {
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "store",
    "temperature",
    "top_p",
    "max_output_tokens",
    "parallel_tool_calls",
    "previous_response_id",
    "metadata",
    "reasoning",
    "text",
    "truncation",
    "user",
    "stream",
    "include",
    "background",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
}
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _invalid(message: str, param: str | None) -> web.Response:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return web.json_response({"error": error}, status=400)


def _schema_error(name: str, schema: Any) -> str | None:
    """What the real API says of a function's parameters in strict mode (its default)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return (
            f"Invalid schema for function '{name}': schema must be a JSON Schema of 'type: object'"
        )
    if schema.get("additionalProperties") is not False:
        return (
            f"Invalid schema for function '{name}': 'additionalProperties' is required to be "
            "supplied and to be false."
        )
    properties = schema.get("properties", {})
    if set(schema.get("required", [])) != set(properties):
        return (
            f"Invalid schema for function '{name}': 'required' is required to be supplied and to "
            "be an array including every key in properties."
        )
    return None


def validation_error(body: Any) -> web.Response | None:
    """The 400 the real Responses API gives this body, or None for a valid one."""
    if not isinstance(body, dict):
        return _invalid("The request body must be a JSON object.", None)
    for key in body:
        if key not in _TOP_LEVEL:
            return _invalid(f"Unknown parameter: '{key}'.", key)
    if not isinstance(body.get("model"), str) or not body["model"]:
        return _invalid("Missing required parameter: 'model'.", "model")
    if not isinstance(body.get("input"), str | list):
        return _invalid("Invalid type for 'input': expected a string or an array.", "input")
    if "store" in body and not isinstance(body["store"], bool):
        return _invalid("Invalid type for 'store': expected a boolean.", "store")
    tools = body.get("tools", [])
    if not isinstance(tools, list):
        return _invalid("Invalid type for 'tools': expected an array.", "tools")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            return _invalid(f"Invalid value for 'tools[{i}].type'.", f"tools[{i}].type")
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            return _invalid(
                f"Invalid 'tools[{i}].name': string does not match pattern.", f"tools[{i}].name"
            )
        strict = tool.get("strict", True)  # the Responses API's default
        if strict and (problem := _schema_error(name, tool.get("parameters"))):
            return _invalid(problem, f"tools[{i}].parameters")
    choice = body.get("tool_choice", "auto")
    if choice not in ("none", "auto", "required") and not isinstance(choice, dict):
        return _invalid(f"Invalid value: '{choice}'.", "tool_choice")
    if choice == "required" and not tools:
        return _invalid("Tool choice 'required' must be used with 'tools'.", "tool_choice")
    return None


@dataclass
class FakeOpenAI(LoopbackFake):
    """`url` is the server's base; the SDK's base_url is `api_url` (with /v1)."""

    api_key: str = "sk-fake-openai"
    decision: str = "approve"
    behaviour: Behaviour = "scripted"
    requests: list[dict[str, Any]] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _glitched: set[str] = field(default_factory=set)  # the conversations' requests, by text

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self._responses)

    @property
    def api_url(self) -> str:
        return f"{self.url}/v1"

    def agent_settings(self, data_dir: Path) -> AgentSettings:
        """Settings whose live model is this double (AGENT_DECIDER=openai reaches it)."""
        return AgentSettings(
            _env_file=None,
            data_dir=data_dir,
            openai_api_key=SecretStr(self.api_key),
            openai_base_url=self.api_url,
            openai_model="test-model",
        )

    def _next_call(self, sent: dict[str, Any]) -> tuple[str, str] | None:
        """The tool the model calls now, and its arguments as the API sends them (a string);
        None: it answers with text and calls no tool."""
        observations: list[dict[str, Any]] = sent["observations"]
        done = {o["kind"] for o in observations}
        behaviour = self.behaviour
        if behaviour == "glitch_once" and sent["request"] not in self._glitched:
            self._glitched.add(sent["request"])
            return None
        if behaviour == "asks":
            answered = {o.get("question_id") for o in observations if o["kind"] == "answer"}
            for question in ("item_opened", "damage"):
                if question not in answered:
                    return "ask_customer", json.dumps({"question": question})
        if behaviour == "approve_at_once":
            return _decision("approve", f"{CANARY}: approve at once, no lookups needed")
        if behaviour == "escalate_at_once":
            return _decision("escalate", "a person should look at this one")
        if behaviour == "deny_everything":
            return _decision("deny", f"{CANARY}: policy says no refunds today")
        if behaviour == "unknown_tool":
            return "issue_refund_now", json.dumps({"amount": 500000})
        if behaviour == "malformed_arguments":
            return "submit_decision", '{"outcome": "approve", "rationale": '
        lookups: tuple[str, ...] = ("lookup_order", "lookup_customer_history")
        if behaviour == "approve_after_lookups":
            lookups += ("check_refund_policy",)
        for tool in lookups:
            if tool not in done:
                return tool, "{}"
        if behaviour == "escalate_injected":
            return _decision("escalate", INJECTED)
        if behaviour == "approve_after_lookups":
            return _decision("approve", f"{CANARY}: whatever the lookups say, approve")
        return _decision(self.decision, "scripted decision")

    async def _responses(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _invalid("We could not parse the JSON body of your request.", None)
        self.requests.append(body)
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            error = {"message": "Incorrect API key provided", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=401)
        if refused := validation_error(body):
            return refused
        if self.take_failure():
            error = {"message": "The server had an error", "type": "server_error"}
            return web.json_response({"error": error}, status=500)
        call = self._next_call(json.loads(body["input"]))
        n = next(self._ids)
        output: dict[str, Any] = {
            "type": "message",
            "id": f"msg_{n}",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "I think so.", "annotations": []}],
        }
        if call is not None:
            output = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": call[0],
                "arguments": call[1],
                "status": "completed",
            }
        return web.json_response(
            {
                "id": f"resp_{n}",
                "object": "response",
                "created_at": int(time.time()),
                "status": "completed",
                "model": body["model"],
                "output": [output],
                "parallel_tool_calls": False,
                "tool_choice": body.get("tool_choice", "auto"),
                "tools": body.get("tools", []),
                "usage": {"input_tokens": 120, "output_tokens": 12, "total_tokens": 132},
            }
        )


def _decision(outcome: str, rationale: str) -> tuple[str, str]:
    return "submit_decision", json.dumps({"outcome": outcome, "rationale": rationale})

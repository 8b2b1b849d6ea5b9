"""The Slack app's tests share one workspace, two recording fakes and the requests Slack signs.

    settings_for(FakeSlackApi) -> build_app(settings, RecordingRouter, RecordingCommands)
    signed(body) -> the headers Slack sends with it; interaction / click_payload -> its bodies
    served_endpoint(FakeSlackApi) -> the HTTP-mode app on an ephemeral port (Endpoint)
    posted_escalation(FakeSlackApi) -> a thread with the agent's Approve / Deny buttons in it

Used by the in-process app tests (tests/test_slack_app.py), the HTTP edges and the early ack
(tests/test_slack_edges.py, tests/test_slack_ack.py) and the hostile-input properties. No
Temporal here: the router and the commands record what reached them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus

import aiohttp
from aiohttp import web

from agent import http_edge
from agent.models import MessageKey, OutboundMessage, ThreadRef
from bot.commands import CommandReply
from bot.ids import workflow_id_for
from bot.slack.app import EVENTS_PATH, build_app, http_web_app
from bot.slack.outbound import SlackThreadPoster
from bot.slack.settings import SlackSettings
from harness.conditions import wait_for
from harness.fakes.slack_api import FakeSlackApi, JsonDict, SlackSender
from harness.recording_router import RecordingRouter

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM = "T0FAKE"
CHANNEL = "C0SUPPORT"
OTHER_CHANNEL = "C0RANDOM"
ADMIN = ("U0ADMIN", "ada")
SUPPORT = ("U0SAM", "sam")

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"


@dataclass
class RecordingCommands:
    """Stands in for bot.commands.Commands: records each call, answers with its name. A
    conversation given as a way to find it is found first, as Commands does after its role
    check; a call whose conversation is not found is answered with why, and not recorded."""

    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    reply_text: str | None = None
    fail: bool = False
    gate: asyncio.Event | None = None  # while set and not yet open, every command waits

    def __getattr__(self, name: str) -> Any:
        if not name.startswith(("crash_", "refund_")):
            raise AttributeError(name)

        async def command(*args: Any) -> CommandReply:
            if name in ("refund_status", "refund_release", "refund_takeover") and callable(args[1]):
                found = await args[1]()
                if isinstance(found, CommandReply):
                    return found
                args = (args[0], found, *args[2:])
            if self.gate is not None:
                await self.gate.wait()
            self.calls.append((name, args))
            if self.fail:
                raise RuntimeError("boom: secret-looking detail")
            return CommandReply(text=self.reply_text or f"{name} done")

        return command


def settings_for(slack: FakeSlackApi, **overrides: Any) -> SlackSettings:
    return slack.app_settings(**{"signing_secret": SECRET, "support_channel": CHANNEL, **overrides})


def signed(body: bytes, content_type: str, secret: str = SECRET, **extra: str) -> dict[str, str]:
    """Slack's v0 signature over the bytes sent (works for bodies that are not UTF-8, too)."""
    ts = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": f"v0={digest}",
        **extra,
    }


def interaction(payload: JsonDict) -> bytes:
    return ("payload=" + quote_plus(json.dumps(payload))).encode()


def click_payload(actions: Any) -> JsonDict:
    return {
        "type": "block_actions",
        "user": {"id": SUPPORT[0], "username": SUPPORT[1], "team_id": TEAM},
        "team": {"id": TEAM, "domain": "fake-workspace"},
        "channel": {"id": CHANNEL, "name": "support"},
        "container": {"type": "message", "message_ts": "1732860000.000200", "channel_id": CHANNEL},
        "trigger_id": "1.2.abc",
        "actions": actions,
    }


class Endpoint:
    """The HTTP-mode app on an ephemeral port, with the recording router and commands."""

    def __init__(self, slack: FakeSlackApi) -> None:
        self.slack = slack
        self.sender = SlackSender(slack)
        self.router = RecordingRouter()
        self.commands = RecordingCommands()
        self.app = build_app(settings_for(slack), self.router, self.commands)
        self.url = ""
        self.runner: web.AppRunner | None = None  # set once it serves over HTTP

    async def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as http,
            http.post(self.url, data=body, headers=headers) as resp,
        ):
            return resp.status, await resp.text()

    async def command(self, command: str, text: str) -> str:
        """Run a slash command as Slack sends it (over HTTP); the ephemeral answer's text."""
        delivery = self.sender.command(command, text, user=ADMIN[0], name=ADMIN[1])
        before = len(self.slack.responses)
        status, body = await self.post(delivery.body.encode(), signed(delivery.body.encode(), FORM))
        assert (status, body) == (200, "")

        async def answered() -> bool:
            return len(self.slack.responses) > before

        await wait_for(answered, timeout=5, what=f"the answer to {command}")
        return self.slack.responses[-1]["text"]


@asynccontextmanager
async def served_endpoint() -> AsyncIterator[Endpoint]:
    """A FakeSlackApi for the workspace, and the app in front of it served over HTTP as the
    Slack process serves it (http_edge.runner), until the block ends."""
    async with FakeSlackApi(team_id=TEAM) as slack:
        endpoint = Endpoint(slack)
        endpoint.runner = runner = http_edge.runner(http_web_app(endpoint.app, SECRET))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        endpoint.url = f"http://127.0.0.1:{runner.addresses[0][1]}{EVENTS_PATH}"
        try:
            yield endpoint
        finally:
            await runner.cleanup()


async def posted_escalation(slack: FakeSlackApi, round: int | None = None) -> tuple[str, str, str]:
    """A customer's thread with the agent's escalation in it, posted by the real outbound half.
    Without a round: buttons as they were posted before escalation rounds existed."""
    root_ts = slack.add_message(CHANNEL, "refund order 4500")
    thread = ThreadRef(platform="slack", workspace=TEAM, channel=CHANNEL, thread=root_ts)
    wid = workflow_id_for(thread)
    async with SlackThreadPoster(slack.token, slack.url) as poster:
        posted = await poster.post(
            OutboundMessage(
                thread=thread,
                key=MessageKey(workflow_id=wid, run_id="run-1", seq=4),
                kind="escalation",
                text="This refund needs a support agent: order 4500 ($450.00).",
                actions=["approve", "deny"],
                round=round,
            )
        )
    return root_ts, posted.platform_message_id, wid

"""Slack end to end over real HTTP: the app in HTTP mode in front of the real stack.

    signed request (FakeSlackApi's SlackSender) -> aiohttp -> Bolt -> router / commands
      -> supervised Worker child -> FakeSlackApi (the Web API)

The app runs in HTTP mode (aiohttp, an ephemeral port) in front of the real stack: the router,
the commands and a supervised Worker child process whose Slack outbound half posts to the same
FakeSlackApi, on the session's Temporal dev server. Requests are signed with the signing secret
exactly as Slack signs them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from temporalio.testing import WorkflowEnvironment

from agent.models import Actor
from agent.settings import DEMO_CUSTOMER
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from bot.conversations import (
    ConversationRouter,
    InboundClick,
    InboundMessage,
    Kept,
    Routed,
    UnreadableEvent,
)
from bot.slack.app import build_app, http_web_app
from bot.slack.links import order_finder
from harness import NO_PROXY
from harness.conditions import wait_for
from harness.fakes.slack_api import Delivery, FakeSlackApi, SlackSender, signed_headers
from harness.stack import supervised_stack
from refund_bot.stack import Stack
from tests.support.slack_app import ADMIN, CHANNEL

# The app tests' channel and people (tests.support.slack_app) in a workspace of its own, and one
# more person.
SECRET = "e2e-signing-secret-0123456789abcdef"
TEAM = "T0E2E"
STRANGER = ("U0EVE", "eve")


@dataclass
class CountingRouter:
    """The real router, with a record of everything the Slack app handed it."""

    inner: ConversationRouter
    messages: list[InboundMessage] = field(default_factory=list)
    clicks: list[InboundClick] = field(default_factory=list)
    results: dict[str, list[Routed]] = field(default_factory=dict)  # event id -> what happened

    async def keep(self, message: InboundMessage) -> Kept | Routed:
        return await self.inner.keep(message)

    async def on_message(self, message: InboundMessage) -> Routed:
        self.messages.append(message)
        routed = await self.inner.on_message(message)
        self.results.setdefault(message.event_id, []).append(routed)
        return routed

    async def on_click(self, click: InboundClick) -> Routed:
        self.clicks.append(click)
        return await self.inner.on_click(click)

    def seen(self, event_id: str) -> bool:
        return self.inner.seen(event_id)

    async def keep_unreadable(self, event: UnreadableEvent) -> None:
        await self.inner.keep_unreadable(event)


@dataclass
class SlackE2E:
    slack: FakeSlackApi
    sender: SlackSender
    stack: Stack
    router: CountingRouter
    url: str
    http: aiohttp.ClientSession
    _seen: dict[str, int] = field(default_factory=dict)

    async def send(
        self, delivery: Delivery, headers: dict[str, str] | None = None, **sign: Any
    ) -> int:
        headers = headers or signed_headers(SECRET, delivery, **sign)
        started = time.monotonic()
        async with self.http.post(self.url, data=delivery.body, headers=headers) as resp:
            await resp.read()
        # Slack gives up after 3 s; every request here is answered well within that.
        assert time.monotonic() - started < 3.0
        return resp.status

    async def command(
        self,
        command: str,
        text: str = "",
        user: tuple[str, str] = ADMIN,
        channel: str = "C0GENERAL",
    ) -> str:
        before = len(self.slack.responses)
        delivery = self.sender.command(command, text, user=user[0], name=user[1], channel=channel)
        assert await self.send(delivery) == 200

        async def answered() -> bool:
            return len(self.slack.responses) > before

        await wait_for(answered, timeout=60, what=f"the answer to {command}")
        (answer,) = self.slack.responses[before:]
        assert answer["response_type"] == "ephemeral"
        return answer["text"]

    def bot_messages(self, root_ts: str) -> list[dict[str, Any]]:
        return [m for m in self.slack.thread(CHANNEL, root_ts) if m.get("bot_id")]

    async def next_bot_message(self, root_ts: str, timeout: float = 30) -> dict[str, Any]:
        seen = self._seen.get(root_ts, 0)

        async def arrived() -> dict[str, Any] | None:
            messages = self.bot_messages(root_ts)
            return messages[seen] if len(messages) > seen else None

        message = await wait_for(arrived, timeout=timeout, what="the agent's next Slack message")
        self._seen[root_ts] = seen + 1
        return message

    async def open(self, text: str) -> tuple[str, str]:
        delivery = self.sender.post(CHANNEL, text)
        assert await self.send(delivery) == 200
        root_ts = delivery.payload["event"]["ts"]
        return root_ts, f"slack-{TEAM}-{CHANNEL}-{root_ts}"

    async def reply(self, root_ts: str, text: str) -> Delivery:
        delivery = self.sender.post(CHANNEL, text, thread_ts=root_ts)
        assert await self.send(delivery) == 200
        return delivery


@asynccontextmanager
async def slack_e2e(temporal_env: WorkflowEnvironment, data_dir: Path) -> AsyncIterator[SlackE2E]:
    async with FakeSlackApi(team_id=TEAM) as slack:
        worker_env = {
            "SLACK_BOT_TOKEN": slack.token,
            "SLACK_API_URL": slack.url,
            # A demo workspace: its unknown users play the demo customer.
            "DEMO_CUSTOMER_FOR_NEW_USERS": DEMO_CUSTOMER,
            **NO_PROXY,
        }
        async with supervised_stack(temporal_env, data_dir, worker_env) as stack:
            settings = slack.app_settings(signing_secret=SECRET, support_channel=CHANNEL)
            router = CountingRouter(stack.router)
            app = build_app(
                settings,
                router,
                stack.commands,
                find_by_order=order_finder(stack.client),
                grants=GrantStore(database_for(stack.settings)),
            )
            runner = web.AppRunner(http_web_app(app, SECRET), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            port = runner.addresses[0][1]
            # The admin who runs the demo: seeded once, as a deployment's first admin would be.
            grants = GrantStore(database_for(stack.settings))
            admin = Actor(platform="slack", user_id=ADMIN[0], display_name=ADMIN[1])
            seeder = Actor(platform="local", user_id="presenter")
            await grants.grant(admin, "admin", None, by=seeder)
            await grants.grant(admin, "presenter", None, by=seeder)
            try:
                async with aiohttp.ClientSession() as http:
                    yield SlackE2E(
                        slack,
                        SlackSender(slack),
                        stack,
                        router,
                        f"http://127.0.0.1:{port}/slack/events",
                        http,
                    )
            finally:
                await runner.cleanup()

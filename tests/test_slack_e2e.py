"""Slack end to end over real HTTP: signed requests in, a fake Slack Web API out, real Temporal.

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
import pytest
from aiohttp import web
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from agent.history import what_survives
from agent.models import Actor, ConversationOutcome
from agent.settings import DEMO_CUSTOMER
from agent.stores.database import database_for
from agent.stores.grants import GrantStore
from agent.stores.ledger import Ledger
from bot.conversations import ConversationRouter, InboundClick, InboundMessage, Routed
from bot.slack.app import build_app, http_web_app
from bot.slack.links import order_finder
from bot.slack.render import APPROVE_ACTION_ID, METADATA_EVENT_TYPE
from refund_bot.app import Stack
from tests.fakes.slack_api import Delivery, FakeSlackApi, SlackSender, signed_headers
from tests.support.conditions import wait_for
from tests.support.owner import refunds_made
from tests.support.stack import supervised_stack

SECRET = "e2e-signing-secret-0123456789abcdef"
TEAM = "T0E2E"
CHANNEL = "C0SUPPORT"
OTHER_CHANNEL = "C0RANDOM"
ADMIN = ("U0ADMIN", "ada")
SUPPORT = ("U0SAM", "sam")
STRANGER = ("U0EVE", "eve")
_NO_PROXY = {name: "" for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")}


@dataclass
class CountingRouter:
    """The real router, with a record of everything the Slack app handed it."""

    inner: ConversationRouter
    messages: list[InboundMessage] = field(default_factory=list)
    clicks: list[InboundClick] = field(default_factory=list)
    results: dict[str, list[Routed]] = field(default_factory=dict)  # event id -> what happened

    async def on_message(self, message: InboundMessage) -> Routed:
        self.messages.append(message)
        routed = await self.inner.on_message(message)
        self.results.setdefault(message.event_id, []).append(routed)
        return routed

    async def on_click(self, click: InboundClick) -> Routed:
        self.clicks.append(click)
        return await self.inner.on_click(click)

    async def check_click(self, click: InboundClick) -> Routed | None:
        return await self.inner.check_click(click)


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

    async def command(self, command: str, text: str = "", user: tuple[str, str] = ADMIN) -> str:
        before = len(self.slack.responses)
        delivery = self.sender.command(command, text, user=user[0], name=user[1])
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
            **_NO_PROXY,
        }
        async with supervised_stack(temporal_env, data_dir, worker_env) as stack:
            settings = slack.app_settings(signing_secret=SECRET, support_channel=CHANNEL)
            router = CountingRouter(stack.router)
            app = build_app(
                settings,
                router,  # type: ignore[arg-type]
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


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _NO_PROXY:
        monkeypatch.delenv(name, raising=False)


async def test_a_slack_conversation_from_first_message_to_one_refund(
    temporal_env: WorkflowEnvironment, tmp_path: Path, no_proxy: None
) -> None:
    async with slack_e2e(temporal_env, tmp_path) as e2e:
        granted = await e2e.command("/refund-grant", "<@U0SAM|sam> refund_approver 1000")
        assert granted.startswith("Granted refund_approver to sam (limit $1,000.00)"), granted

        # A customer posts in the support channel: the thread opens on that message.
        root_ts, wid = await e2e.open("please refund order 4500, it arrived broken")
        question = await e2e.next_bot_message(root_ts)
        assert question["text"] == "Was the package opened?"
        # Slack also delivers the bot's own post as an event; it reaches nothing.
        own = e2e.sender.bot_post(
            CHANNEL,
            question["text"],
            thread_ts=root_ts,
            bot_id=e2e.slack.bot_id,
            user=e2e.slack.bot_user_id,
        )
        assert await e2e.send(own) == 200

        answer = await e2e.reply(root_ts, "Yes")
        answer_id = answer.payload["event_id"]

        async def accepted() -> bool:
            return bool(e2e.router.results.get(answer_id))

        await wait_for(accepted, what="the answer accepted")
        # Slack did not get our 200 in time (it thinks) and resends the same event.
        assert await e2e.send(answer, retry_num=1, retry_reason="http_timeout") == 200

        crashed = await e2e.command("/crash-worker")
        assert crashed.startswith("Worker SIGKILLed and replaced"), crashed

        assert (await e2e.next_bot_message(root_ts))["text"] == "What was damaged?"
        # An edit of an answer and another app's bot in the thread reach nothing.
        assert await e2e.send(e2e.sender.edit(CHANNEL, answer.payload["event"]["ts"], "No")) == 200
        assert await e2e.send(e2e.sender.bot_post(CHANNEL, "beep", thread_ts=root_ts)) == 200
        last = await e2e.reply(root_ts, "Split seam")

        escalation = await e2e.next_bot_message(root_ts)
        assert "needs a support agent" in escalation["text"]
        assert any(b["type"] == "actions" for b in escalation["blocks"])

        # The presenter asks where it stands, by order number and by the link of a reply.
        async def status_by_order() -> str | None:
            text = await e2e.command("/refund-status", "4500")
            return text if wid in text else None

        by_order = await wait_for(status_by_order, timeout=30, interval=0.5, what="visibility")
        assert "customer answers: 2" in by_order
        link = e2e.sender.permalink(CHANNEL, last.payload["event"]["ts"])
        by_link = await e2e.command("/refund-status", link)
        assert wid in by_link and "next action: wait for a support agent's approval" in by_link

        # The grant holder approves in the thread.
        click = e2e.sender.click(
            CHANNEL, escalation["ts"], APPROVE_ACTION_ID, user=SUPPORT[0], name=SUPPORT[1]
        )
        assert await e2e.send(click) == 200
        outcome = await e2e.next_bot_message(root_ts)
        assert outcome["text"].startswith("Your refund is complete: $450.00 for order 4500")
        handle = e2e.stack.client.get_workflow_handle(wid, result_type=ConversationOutcome)
        result = await handle.result()
        assert result.status == "refunded" and result.refund

        # The clicked message lost its buttons; "checking authorization" was replaced by what
        # happened, by the Workflow.
        updated = e2e.slack.message(CHANNEL, escalation["ts"])
        assert updated is not None
        assert [b["type"] for b in updated["blocks"]] == ["section", "context"]
        assert updated["blocks"][-1]["elements"][0]["text"] == (
            f"Approved by <@U0SAM>: refund issued ($450.00, reference {result.refund.refund_id})."
        )

        # One refund, one call with its key.
        refunds = await Ledger(database_for(e2e.stack.settings)).refunds_for_workflow(wid)
        assert len(refunds) == 1 and refunds[0].calls == 1 and refunds[0].amount_cents == 45000

        # Every agent message is in the thread, each posted once.
        bot = e2e.bot_messages(root_ts)
        assert all(m["thread_ts"] == root_ts for m in bot)
        texts = [m["text"] for m in bot]
        assert len(texts) == len(set(texts)), texts
        keys = [m["metadata"]["event_payload"]["key"] for m in bot]
        assert all(m["metadata"]["event_type"] == METADATA_EVENT_TYPE for m in bot)
        assert len(keys) == len(set(keys))
        posts = [c for c in e2e.slack.calls_to("chat.postMessage") if c.status == 200]
        assert len(posts) == len(bot)
        assert [
            m["text"] for m in e2e.slack.history(CHANNEL) if m.get("thread_ts", m["ts"]) == m["ts"]
        ] == [
            "please refund order 4500, it arrived broken"
        ]  # nothing at the channel's top level but the customer's message

        # The retry, the edit and the bots never became answers.
        survivors = await what_survives(e2e.stack.client, wid)
        assert survivors.answers == {"item_opened": "Yes", "damage": "Split seam"}
        assert [m.text for m in e2e.router.messages] == [
            "please refund order 4500, it arrived broken",
            "Yes",
            "Yes",  # the retry: handed to the router, dropped there by its event id
            "Split seam",
        ]
        assert survivors.customer_signals == 3  # the opening message, "Yes", "Split seam"
        assert e2e.router.results[answer_id] == [Routed.SIGNALLED, Routed.DUPLICATE]
        assert [c.actor.user_id for c in e2e.router.clicks] == [SUPPORT[0]]


async def test_bad_input_over_http_reaches_nothing(
    temporal_env: WorkflowEnvironment, tmp_path: Path, no_proxy: None
) -> None:
    async with slack_e2e(temporal_env, tmp_path) as e2e:
        client = e2e.stack.client

        async def never_started(root_ts: str, channel: str = CHANNEL) -> None:
            handle = client.get_workflow_handle(f"slack-{TEAM}-{channel}-{root_ts}")
            with pytest.raises(RPCError) as caught:
                await handle.describe()
            assert caught.value.status == RPCStatusCode.NOT_FOUND

        # A forged signature and a stale timestamp: 401, and nothing reaches the router.
        forged = e2e.sender.post(CHANNEL, "please refund order 4500")
        assert await e2e.send(forged, headers=signed_headers("guessed-secret", forged)) == 401
        stale = e2e.sender.post(CHANNEL, "please refund order 1234")
        old = int(time.time()) - 5 * 60 - 30
        assert await e2e.send(stale, timestamp=old) == 401
        grab = e2e.sender.command("/refund-grant", "<@U0EVE|eve> admin", user="U0EVE", name="eve")
        assert await e2e.send(grab, headers=signed_headers("guessed-secret", grab)) == 401

        # A message in another channel is ignored.
        elsewhere = e2e.sender.post(OTHER_CHANNEL, "please refund order 4500")
        assert await e2e.send(elsewhere) == 200

        # A held conversation that escalates.
        assert (
            await e2e.command("/refund-hold", "on")
            == "Hold before refund for new conversations: on."
        )
        assert (await e2e.command("/refund-grant", "<@U0SAM|sam> refund_approver 1000")).startswith(
            "Granted"
        )
        root_ts, wid = await e2e.open("please refund order 4500")
        for answer in ("Yes", "Split seam"):
            await e2e.next_bot_message(root_ts)
            await e2e.reply(root_ts, answer)
        escalation = await e2e.next_bot_message(root_ts)
        assert escalation["text"].startswith("This refund needs a support agent")

        # Someone without a grant clicks Approve: told privately, the buttons stay.
        eve = e2e.sender.click(
            CHANNEL, escalation["ts"], APPROVE_ACTION_ID, user=STRANGER[0], name=STRANGER[1]
        )
        assert await e2e.send(eve) == 200

        async def refused() -> list[dict[str, Any]]:
            return [m for m in e2e.slack.ephemerals if m["user"] == STRANGER[0]]

        (refusal,) = await wait_for(refused, what="eve's private refusal")
        assert refusal["thread_ts"] == root_ts and "you don't hold it" in refusal["text"]
        assert e2e.router.clicks == [] and e2e.slack.calls_to("chat.update") == []

        # The approver clicks; the grant is revoked while the refund is held; then released.
        sam = e2e.sender.click(
            CHANNEL, escalation["ts"], APPROVE_ACTION_ID, user=SUPPORT[0], name=SUPPORT[1]
        )
        assert await e2e.send(sam) == 200
        held = await e2e.next_bot_message(root_ts)
        assert held["text"].startswith("Refund of $450.00 approved. Holding before the refund")
        revoked = await e2e.command("/refund-revoke", "<@U0SAM|sam> refund_approver")
        assert revoked.startswith("Revoked refund_approver from sam"), revoked
        # "Release refund" message shortcut on the escalation: no link to type.
        shortcut = e2e.sender.shortcut(
            CHANNEL, escalation["ts"], "refund_release", user=ADMIN[0], name=ADMIN[1]
        )
        assert await e2e.send(shortcut) == 200
        no_refund = await e2e.next_bot_message(root_ts)
        assert "No refund yet: sam holds no live refund_approver grant" in no_refund["text"]

        async def released_told() -> list[dict[str, Any]]:
            return [m for m in e2e.slack.ephemerals if m["user"] == ADMIN[0]]

        (released,) = await wait_for(released_told, what="the shortcut's private answer")
        assert released["text"] == f"Released {wid}: the refund goes ahead."
        assert released["thread_ts"] == root_ts

        async def waiting_again() -> bool:
            view = await client.get_workflow_handle(wid).query("view")
            return view["phase"] == "waiting_for_approval"

        await wait_for(waiting_again, what="the conversation waiting for approval again")
        assert await refunds_made(e2e.stack.settings) == []

        # Only the one real conversation reached the router; the forged and stale never did.
        assert [m.thread.thread for m in e2e.router.messages if m.opens_thread] == [root_ts]
        await never_started(forged.payload["event"]["ts"])
        await never_started(stale.payload["event"]["ts"])
        await never_started(elsewhere.payload["event"]["ts"], OTHER_CHANNEL)
        assert not any("eve" in r["text"] and "Granted" in r["text"] for r in e2e.slack.responses)
        admins = [
            g
            for g in await GrantStore(database_for(e2e.stack.settings)).live_grants()
            if g.role == "admin" and g.platform == "slack"
        ]
        assert [g.user_id for g in admins] == [ADMIN[0]]
        await client.get_workflow_handle(wid).terminate("test over")

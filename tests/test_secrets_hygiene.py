"""Secrets hygiene: with every secret set to a recognisable value, none appears anywhere it could
leak: not in any log, not in Event History as the server stores it.

The story runs as it does in production, in real processes: `refund-bot -v run` (embedded
Temporal, the supervised Worker, Slack in HTTP mode against harness/fakes/slack_api.py, Stripe test
mode against harness/fakes/stripe_api.py, the OpenAI decider against harness/fakes/openai_api.py,
payloads encrypted with CODEC_KEYS), `refund-bot codec-server` with its bearer token, and a second
`refund-bot worker` holding the Discord token, which posts a Discord conversation's questions to
harness/fakes/discord_api.py. (The Discord gateway is discord.py's fixed wss://gateway.discord.gg,
which no local fake can stand in for, so the Discord token is exercised by the Worker's outbound
half.) Every secret is also shown to have been used: the fakes received it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads
from temporalio.client import Client

from agent.codec import CodecKey
from agent.models import Actor, ConversationStart, CustomerMessage, ThreadRef
from agent.settings import TemporalSettings
from agent.temporal_client import connect
from agent.workflow import RefundConversation
from bot.ids import workflow_id_for
from harness import free_port
from harness.codec import raw_bytes
from harness.conditions import wait_for
from harness.fakes.discord_api import FakeDiscordAPI
from harness.fakes.openai_api import FakeOpenAI
from harness.fakes.slack_api import FakeSlackApi, SlackSender, signed_headers
from harness.fakes.stripe_api import FakeStripe

MARK = "HYGIENE"
CODEC_KEY = CodecKey("hygiene-key", b"HYGIENE-codec-key-0006-32-bytes!")
SECRETS = {
    "SLACK_BOT_TOKEN": f"xoxb-{MARK}-slack-bot-token-0001",
    "SLACK_SIGNING_SECRET": f"{MARK}-slack-signing-secret-0002",
    "DISCORD_TOKEN": f"{MARK}-discord-bot-token-0003",
    "STRIPE_API_KEY": f"sk_test_{MARK}_stripe_key_0004",
    "OPENAI_API_KEY": f"sk-{MARK}-openai-key-0005",
    "CODEC_KEYS": CODEC_KEY.entry(),
    "CODEC_SERVER_TOKEN": f"{MARK}-codec-server-token-0007",
}
# Each secret as it could show up: its value, and the codec key's bytes and base64 too.
NEEDLES = [*SECRETS.values(), CODEC_KEY.secret.decode(), CODEC_KEY.entry().split(":")[1], MARK]
TEAM, CHANNEL, ADMIN = "T0SHOP", "C0SUPPORT", "U0ADMIN"
OPENING = "please refund order 1234, my plush python unravelled"
ANSWER = "Its tail came off in the wash"
GUILD, DISCORD_SUPPORT, DISCORD_THREAD = (
    1190000000000000001,
    1190000000000000002,
    1190000000000000003,
)


@dataclass
class Process:
    """A refund-bot command running with its output in a file, so every line it wrote is kept."""

    name: str
    proc: asyncio.subprocess.Process
    output: Path

    async def stop(self) -> str:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(60):
                    await self.proc.wait()
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        return self.output.read_text(errors="replace")


@dataclass
class Story:
    tmp: Path
    env: dict[str, str]
    processes: list[Process] = field(default_factory=list)

    async def start(self, name: str, *args: str, **env: str) -> Process:
        output = self.tmp / f"{name}.out"
        with output.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "refund_bot", *args,
                env={**self.env, **env},
                cwd=self.tmp,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
        process = Process(name, proc, output)
        self.processes.append(process)
        return process

    def running(self) -> bool:
        for p in self.processes:
            assert p.proc.returncode is None, f"{p.name} exited: {p.output.read_text()[-3000:]}"
        return True


@contextlib.asynccontextmanager
async def fakes() -> AsyncIterator[tuple[FakeSlackApi, FakeStripe, FakeOpenAI, FakeDiscordAPI]]:
    async with (
        FakeSlackApi(token=SECRETS["SLACK_BOT_TOKEN"], team_id=TEAM) as slack,
        FakeStripe(api_key=SECRETS["STRIPE_API_KEY"]) as stripe,
        FakeOpenAI(api_key=SECRETS["OPENAI_API_KEY"]) as openai,
        FakeDiscordAPI(token=SECRETS["DISCORD_TOKEN"]) as discord,
    ):
        yield slack, stripe, openai, discord


async def test_no_secret_reaches_a_log_or_event_history(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    address = f"127.0.0.1:{free_port()}"
    slack_port, codec_port = free_port(), free_port()
    async with fakes() as (slack, stripe, openai, discord), aiohttp.ClientSession() as http:
        story = Story(
            tmp_path,
            {
                "PATH": os.environ["PATH"],
                "HOME": str(tmp_path),
                **SECRETS,
                "DATA_DIR": str(data_dir),
                "TEMPORAL_ADDRESS": address,
                "TEMPORAL_UI_PORT": str(free_port()),
                "SLACK_SUPPORT_CHANNEL": CHANNEL,
                "SLACK_PORT": str(slack_port),
                "SLACK_API_URL": slack.url,
                "STRIPE_API_BASE": stripe.url,
                "AGENT_DECIDER": "openai",
                "OPENAI_BASE_URL": openai.api_url,
                "REFUND_ADMINS": f"slack:{ADMIN}",
                "DEMO_CUSTOMER_FOR_NEW_USERS": "cus_nyghtowl",  # a demo workspace
                "CODEC_SERVER_PORT": str(codec_port),
            },
        )
        try:
            # The main job, without Discord (its gateway client would try discord.gg).
            await story.start("run", "-v", "run", DISCORD_TOKEN="")
            events = f"http://127.0.0.1:{slack_port}/slack/events"

            async def serving() -> bool:
                story.running()
                with contextlib.suppress(aiohttp.ClientConnectionError):
                    async with http.post(events, data=b"") as response:
                        return response.status == 401  # up, refusing an unsigned request
                return False

            await wait_for(serving, timeout=120, what="refund-bot run serving Slack")
            temporal = TemporalSettings(_env_file=None, address=address)
            client = await connect(temporal, keys=[CODEC_KEY])
            await story.start("codec-server", "codec-server")
            await story.start(
                "discord-worker",
                "worker",
                TEMPORAL_TASK_QUEUE="discord",
                DISCORD_API_URL=discord.api_url,
            )

            # A Slack customer, start to finish: two answers, the model's lookups, the refund.
            sender = SlackSender(slack)

            async def send(delivery) -> None:
                headers = signed_headers(SECRETS["SLACK_SIGNING_SECRET"], delivery)
                async with http.post(events, data=delivery.body, headers=headers) as response:
                    assert response.status == 200

            opening = sender.post(CHANNEL, OPENING)
            await send(opening)
            root = opening.payload["event"]["ts"]
            for asked, answer in enumerate(("Yes", ANSWER), 1):
                await _questions(slack, root, story, asked)
                await send(sender.post(CHANNEL, answer, thread_ts=root))
            await wait_for(
                lambda: any("refund is complete" in m["text"] for m in slack.thread(CHANNEL, root)),
                timeout=120,
                what="Your refund is complete, in Slack",
            )
            workflow_id = f"slack-{TEAM}-{CHANNEL}-{root}"

            # A presenter reads it back through the bot, which decrypts it.
            await send(sender.command("/refund-status", workflow_id, user=ADMIN, name="ada"))
            (status,) = await wait_for(lambda: slack.responses, timeout=60, what="/refund-status")
            assert f"damage: {ANSWER}" in status["text"], status

            # A Discord conversation, posted by the Worker that holds the Discord token.
            customer = Actor(platform="discord", user_id="1190000000000000099", display_name="Q")
            thread = ThreadRef(
                platform="discord",
                workspace=str(GUILD),
                channel=str(DISCORD_SUPPORT),
                thread=str(DISCORD_THREAD),
            )
            await client.start_workflow(
                RefundConversation.run,
                ConversationStart(
                    thread=thread, customer=customer, opening_message_id="d1", opening_text=OPENING
                ),
                id=workflow_id_for(thread),
                task_queue="discord",
                start_signal="customer_message",
                start_signal_args=[CustomerMessage(message_id="d1", author=customer, text=OPENING)],
            )
            posted = await wait_for(
                lambda: discord.messages(DISCORD_THREAD) if story.running() else None,
                timeout=120,
                what="the Discord Worker's answer in the thread",
            )
            # Order 1234 was refunded in the Slack conversation: answered at once.
            assert posted[0]["content"].startswith("I can't refund this order. Order 1234 was")

            # The codec server decrypts for whoever holds its token, and only for them.
            raw = await Client.connect(address)  # no codec: the server's bytes as they are
            stored = await raw.get_workflow_handle(workflow_id).fetch_history()
            signal_input = next(
                e.workflow_execution_signaled_event_attributes.input
                for e in stored.events
                if e.HasField("workflow_execution_signaled_event_attributes")
            )
            codec = f"http://127.0.0.1:{codec_port}/decode"
            body = json_format.MessageToDict(signal_input)
            token = {"Authorization": f"Bearer {SECRETS['CODEC_SERVER_TOKEN']}"}
            async with http.post(codec, json=body, headers=token) as response:
                assert response.status == 200
                decoded = json_format.ParseDict(await response.json(), Payloads())
            assert OPENING.encode() in decoded.SerializeToString()
            async with http.post(codec, json=body) as response:
                assert response.status == 401

            # Every history on the server, as the server stores it.
            histories = []
            async for execution in raw.list_workflows():
                history = await raw.get_workflow_handle(execution.id).fetch_history()
                histories.append(raw_bytes(history) + history.to_json().encode())
            assert len(histories) >= 2
        finally:
            outputs = {p.name: await p.stop() for p in reversed(story.processes)}

    logs = {
        **outputs,
        "worker.log": (data_dir / "worker.log").read_text(errors="replace"),
        "temporal-server.log": (data_dir / "temporal-server.log").read_text(errors="replace"),
    }
    assert "issue_refund" in logs["worker.log"]  # the Worker logged its work at INFO
    assert "Codec server on" in logs["codec-server"]
    for name, text in logs.items():
        for needle in NEEDLES:
            assert needle not in text, f"{needle!r} appears in {name}"
    for stored_bytes in histories:
        for needle in [*NEEDLES, OPENING, ANSWER, "plush python"]:
            assert needle.encode() not in stored_bytes, f"{needle!r} is in Event History"

    # Every secret was live: each fake saw it, so its absence above means something.
    assert slack.calls_to("chat.postMessage")  # the fake refuses any other bot token
    assert any(r.method == "POST" for r in stripe.requests) and stripe.refunds
    assert openai.requests
    assert discord.requests_to("POST /channels/{channel_id}/messages")
    assert all(
        r.headers.get("Authorization") == f"Bot {SECRETS['DISCORD_TOKEN']}"
        for r in discord.requests_to("POST /channels/{channel_id}/messages")
    )


async def _questions(slack: FakeSlackApi, root: str, story: Story, count: int) -> None:
    def asked() -> bool:
        story.running()
        return len([m for m in slack.thread(CHANNEL, root) if m.get("bot_id")]) >= count

    await wait_for(asked, timeout=120, what=f"the agent's question {count} in Slack")

"""`refund-bot run` wires a platform from settings alone: Slack here, end to end through it."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from agent.settings import AgentSettings, TemporalSettings
from harness import free_port
from harness.conditions import wait_for
from harness.fakes.slack_api import FakeSlackApi, SlackSender, signed_headers
from refund_bot.app import run

SECRET = "run-wiring-signing-secret"
CHANNEL = "C0SUPPORT"


async def test_run_serves_slack_when_its_token_is_set(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no developer .env can leak in
    async with FakeSlackApi(team_id="T0RUN") as slack:
        port = free_port()
        env = {
            "SLACK_BOT_TOKEN": slack.token,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_SUPPORT_CHANNEL": CHANNEL,
            "SLACK_PORT": str(port),
            "SLACK_API_URL": slack.url,
            "DATA_DIR": str(tmp_path),  # the Worker child reads its settings from here too
            # The Slack customer is the demo customer: asked about order 1234, not told it is
            # not theirs.
            "DEMO_CUSTOMER_FOR_NEW_USERS": "cus_nyghtowl",
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        for name in ("SLACK_APP_TOKEN", "DISCORD_TOKEN", "STRIPE_API_KEY", "HTTP_PROXY"):
            monkeypatch.delenv(name, raising=False)
        temporal = TemporalSettings(
            _env_file=None,
            address=f"127.0.0.1:{free_port()}",
            ui_port=free_port(),
        )
        settings = AgentSettings(_env_file=None, data_dir=tmp_path)
        main = asyncio.create_task(run(temporal, settings, local=False))
        sender = SlackSender(slack)
        url = f"http://127.0.0.1:{port}/slack/events"
        try:
            async with aiohttp.ClientSession() as http:

                async def serving() -> bool:
                    assert not main.done(), main  # run() must not have ended
                    try:
                        async with http.post(url, data=b"") as resp:
                            return resp.status == 401  # up, and refusing an unsigned request
                    except aiohttp.ClientConnectionError:
                        return False

                await wait_for(serving, timeout=60, what="the Slack app serving")
                delivery = sender.post(CHANNEL, "please refund order 1234")
                headers = signed_headers(SECRET, delivery)
                async with http.post(url, data=delivery.body, headers=headers) as resp:
                    assert resp.status == 200
            root_ts = delivery.payload["event"]["ts"]

            def question() -> list:
                return [m for m in slack.thread(CHANNEL, root_ts) if m.get("bot_id")]

            (asked,) = await wait_for(question, timeout=60, what="the agent's question in Slack")
            assert asked["text"] == "Was the package opened?"
            assert asked["thread_ts"] == root_ts
        finally:
            main.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await main

"""One platform's outage never stops another: the real `refund-bot run` with Discord unreachable.

Slack (HTTP mode, fake Web API) + Discord (API and gateway at a closed port) configured
    -> a Slack conversation to "Your refund is complete", /refund-status answers
    -> Discord: one line per failed attempt, retrying, no traceback; the process runs on
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import aiohttp
from temporalio.testing import WorkflowEnvironment

from harness import free_port
from harness.cli_process import RefundBotProcess, clean_environment
from harness.codec import TEST_CODEC_ENV
from harness.conditions import wait_for
from harness.fakes.slack_api import Delivery, FakeSlackApi, SlackSender, signed_headers

SECRET = "isolation-signing-secret-0123456789"
TEAM = "T0ISO"
CHANNEL = "C0SUPPORT"
PRESENTER = ("U0PAT", "pat")
STARTUP = 120.0
TURN = 60.0


async def test_slack_serves_while_discord_is_unreachable(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    queue = f"isolation-{uuid.uuid4().hex[:8]}"
    slack_port, nowhere = free_port(), free_port()  # nothing listens at `nowhere`
    async with FakeSlackApi(team_id=TEAM) as slack:
        env = clean_environment(
            **TEST_CODEC_ENV,  # the session's server: its clients read with the tests' key
            SLACK_BOT_TOKEN=slack.token,
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_SUPPORT_CHANNEL=CHANNEL,
            SLACK_PORT=str(slack_port),
            SLACK_API_URL=slack.url,
            DISCORD_TOKEN="discord-token-that-never-leaves",
            DISCORD_SUPPORT_CHANNEL_ID="1170000000000000009",
            DISCORD_API_URL=f"http://127.0.0.1:{nowhere}/api/v10",
            DISCORD_GATEWAY_URL=f"ws://127.0.0.1:{nowhere}/",
            REFUND_ADMINS=f"slack:{PRESENTER[0]}",
            DEMO_CUSTOMER_FOR_NEW_USERS="cus_nyghtowl",  # a demo workspace
            DATA_DIR=str(tmp_path / "data"),
            TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
            TEMPORAL_TASK_QUEUE=queue,
            TEMPORAL_CONTROL_TASK_QUEUE=f"{queue}-control",
            TEMPORAL_UI_PORT=str(free_port()),
        )
        bot = await RefundBotProcess.start(["run"], env, tmp_path)
        sender = SlackSender(slack)
        url = f"http://127.0.0.1:{slack_port}/slack/events"
        try:
            async with aiohttp.ClientSession() as http:

                async def send(delivery: Delivery) -> int:
                    headers = signed_headers(SECRET, delivery)
                    async with http.post(url, data=delivery.body, headers=headers) as resp:
                        return resp.status

                async def serving() -> bool:
                    assert bot.running, bot.stderr
                    try:
                        async with http.post(url, data=b"") as resp:
                            return resp.status == 401  # up, refusing an unsigned request
                    except aiohttp.ClientConnectionError:
                        return False

                await wait_for(serving, timeout=STARTUP, what="the Slack app serving")

                # Discord keeps failing meanwhile: one line per attempt, and on it goes.
                failures = await bot.expect_many(
                    rf"^.* WARNING bot\.reconnect: discord: ClientConnectorError: Cannot connect "
                    rf"to host 127\.0\.0\.1:{nowhere} .*; retrying in [\d.]+s$",
                    count=2,
                    timeout=TURN,
                )
                assert len(failures) == 2

                root = sender.post(CHANNEL, "please refund order 1234")
                assert await send(root) == 200
                root_ts = root.payload["event"]["ts"]
                workflow_id = f"slack-{TEAM}-{CHANNEL}-{root_ts}"
                seen = 0

                async def next_bot_message() -> dict[str, Any]:
                    nonlocal seen

                    def arrived() -> dict[str, Any] | None:
                        ours = [m for m in slack.thread(CHANNEL, root_ts) if m.get("bot_id")]
                        return ours[seen] if len(ours) > seen else None

                    message = await wait_for(arrived, timeout=TURN, what="the agent's message")
                    seen += 1
                    return message

                assert (await next_bot_message())["text"] == "Was the package opened?"
                assert await send(sender.post(CHANNEL, "Yes", thread_ts=root_ts)) == 200
                assert (await next_bot_message())["text"] == "What was damaged?"
                assert await send(sender.post(CHANNEL, "Split seam", thread_ts=root_ts)) == 200
                outcome = await next_bot_message()
                assert outcome["text"].startswith("Your refund is complete")

                command = sender.command(
                    "/refund-status", workflow_id, user=PRESENTER[0], name=PRESENTER[1]
                )
                assert await send(command) == 200
                [answer] = await wait_for(
                    lambda: slack.responses, timeout=TURN, what="/refund-status answered"
                )
                assert workflow_id in answer["text"] and answer["response_type"] == "ephemeral"

            # Still running, Discord still retrying (never down, never raised), no traceback.
            assert bot.running
            stderr = bot.stderr
            discord_lines = [ln for ln in stderr.splitlines() if "bot.reconnect: discord:" in ln]
            assert discord_lines[-1].endswith("s") and "; retrying in " in discord_lines[-1]
            assert "is down" not in stderr and "Traceback" not in stderr
            assert "discord-token-that-never-leaves" not in bot.output
            assert await bot.stop() == 0
        finally:
            await bot.close()

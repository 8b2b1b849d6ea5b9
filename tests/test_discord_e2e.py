"""Discord end to end: the real `refund-bot run` process against a fake Discord, on real Temporal.

    customer MESSAGE_CREATE -> thread -> questions -> escalation -> /refund-status -> Approve
        -> "Your refund is complete"

The process is started as an operator starts it, configured by environment alone: DISCORD_API_URL
(the fake's REST API under /api/v10) and DISCORD_GATEWAY_URL (its gateway websocket), the session's
Temporal dev server, a fresh data directory. Its Worker child posts the agent's messages to the
same fake over REST and reads the approver's role from it. Everything a person does is an event
the fake's gateway dispatches exactly as Discord does: a message, a slash command, a button click.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from agent.history import what_survives
from agent.stores.ledger import Ledger
from agent.stores.sqlite import SqliteDatabase
from harness import free_port
from harness.cli_process import RefundBotProcess, clean_environment
from harness.codec import TEST_CODEC_ENV
from harness.conditions import wait_for
from harness.fakes.discord_api import THREADS_ROUTE, FakeDiscordAPI, Interaction
from harness.fakes.discord_gateway import GUILD_MESSAGES, GUILDS, MESSAGE_CONTENT
from tests.support.discord_guild import (
    AGENT,
    APPROVER_ROLE,
    CUSTOMER,
    GUILD,
    PRESENTER,
    SUPPORT,
    seed_guild,
)

STARTUP = 120.0  # a Worker child to start and poll, on a machine shared with other test runs
TURN = 60.0


def bot_messages(api: FakeDiscordAPI, channel_id: int | str) -> list[dict[str, Any]]:
    return [m for m in api.messages(channel_id) if m["author"]["id"] == api.bot_user["id"]]


async def next_bot_message(api: FakeDiscordAPI, thread_id: str, seen: int) -> dict[str, Any]:
    async def arrived() -> dict[str, Any] | None:
        messages = bot_messages(api, thread_id)
        return messages[seen] if len(messages) > seen else None

    return await wait_for(arrived, timeout=TURN, what=f"agent message {seen + 1} in the thread")


async def answered(interaction: Interaction) -> str:
    """The text the person who ran a command saw (a direct answer, or a deferral's followup)."""

    async def text() -> str | None:
        if interaction.callbacks and interaction.callbacks[0]["type"] == 4:
            return str(interaction.callbacks[0]["data"]["content"])
        if interaction.followups:
            return str(interaction.followups[0]["content"])
        return None

    return await wait_for(text, timeout=TURN, what="the command's answer")


async def test_a_discord_conversation_through_the_real_process(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    queue = f"discord-e2e-{uuid.uuid4().hex[:8]}"
    async with FakeDiscordAPI() as api:
        seed_guild(api)
        env = clean_environment(
            **TEST_CODEC_ENV,  # the session's server: its clients read with the tests' key
            DISCORD_TOKEN=api.token,
            DISCORD_SUPPORT_CHANNEL_ID=str(SUPPORT),
            DISCORD_GUILD_ID=str(GUILD),
            DISCORD_APPROVER_ROLE=str(APPROVER_ROLE),
            DISCORD_API_URL=api.api_url,
            DISCORD_GATEWAY_URL=api.gateway_url,
            REFUND_ADMINS=f"discord:{PRESENTER}",
            DEMO_CUSTOMER_FOR_NEW_USERS="cus_nyghtowl",  # a demo workspace
            DATA_DIR=str(tmp_path / "data"),
            TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
            TEMPORAL_TASK_QUEUE=queue,
            TEMPORAL_CONTROL_TASK_QUEUE=f"{queue}-control",
            TEMPORAL_UI_PORT=str(free_port()),
        )
        bot = await RefundBotProcess.start(["run"], env, tmp_path)
        try:
            # Logged in over REST (commands registered to the guild), then IDENTIFY at the
            # configured gateway with zlib-stream, asking for exactly the intents it needs.
            await wait_for(
                lambda: bool(api.commands.get(GUILD)) and api.gateway.connected == 1,
                timeout=STARTUP,
                what="the bot logged in and connected to the gateway",
            )
            [identify] = api.gateway.identifies
            assert identify["intents"] == GUILDS | GUILD_MESSAGES | MESSAGE_CONTENT
            assert api.gateway.queries[0]["compress"] == "zlib-stream"

            # A customer writes in the support channel: a thread opens on the message.
            opening = api.user_message(SUPPORT, CUSTOMER, "please refund order 4500")
            thread_id = opening["id"]  # a thread on a message takes the message's id
            workflow_id = f"discord-{GUILD}-{thread_id}"
            question = await next_bot_message(api, thread_id, 0)
            assert question["content"] == "Was the package opened?"
            thread = api.channel(thread_id)
            assert thread is not None and thread["parent_id"] == str(SUPPORT)

            # Discord asks for a reconnect; the RESUME replays the opening message once more.
            [sent] = [s for s in api.gateway.sent("MESSAGE_CREATE") if s.data["id"] == thread_id]
            await api.gateway.request_reconnect(redeliver_from=sent.seq)
            await wait_for(lambda: api.gateway.resumes, timeout=TURN, what="the RESUME")
            assert thread_id in [s.data.get("id") for s in api.gateway.replayed()]

            api.user_message(int(thread_id), CUSTOMER, "Yes")
            assert (await next_bot_message(api, thread_id, 1))["content"] == "What was damaged?"
            api.user_message(int(thread_id), CUSTOMER, "The handle snapped off")
            escalation = await next_bot_message(api, thread_id, 2)
            assert escalation["content"].startswith("This refund needs a support agent")
            buttons = {
                c["custom_id"]: c for row in escalation["components"] for c in row["components"]
            }
            assert set(buttons) == {
                f"refund:approve:r1:{workflow_id}",
                f"refund:deny:r1:{workflow_id}",
            }

            # The presenter asks where it stands, with the slash command, in the thread.
            status = api.command_interaction("refund-status", int(thread_id), PRESENTER)
            text = await answered(api.interactions[int(status["id"])])
            assert workflow_id in text
            assert "next action: wait for a support agent's approval" in text

            # The support agent (holding the approver role) clicks Approve.
            click = api.component_interaction(
                int(thread_id), escalation["id"], AGENT, f"refund:approve:r1:{workflow_id}"
            )
            outcome = await next_bot_message(api, thread_id, 3)
            assert outcome["content"].startswith("Your refund is complete: $450.00 for order 4500")
            clicked = api.interactions[int(click["id"])]
            assert clicked.callbacks, "the click was answered"
            edited = api.message(thread_id, escalation["id"])
            assert edited is not None and edited["components"] == []
            assert f"Approved by <@{AGENT}>" in edited["content"]

            # One thread, opened once: the redelivered opening made no request to Discord.
            assert [r.status for r in api.requests_to(THREADS_ROUTE)] == [201]
            survived = await what_survives(temporal_env.client, workflow_id)
            assert survived.customer_signals == 3  # the opening, "Yes", the damage
            refunds = await Ledger(SqliteDatabase(tmp_path / "data")).refunds_for_workflow(
                workflow_id
            )
            assert len(refunds) == 1 and refunds[0].amount_cents == 45000
            assert bot.running
            assert bot.stderr == ""  # nothing went wrong, so nothing to warn an operator of
            assert await bot.stop() == 0
        finally:
            await bot.close()

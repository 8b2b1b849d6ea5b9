"""Slack end to end over real HTTP: signed requests in, a fake Slack Web API out, real Temporal.

The app runs in HTTP mode (aiohttp, an ephemeral port) in front of the real stack: the router,
the commands and a supervised Worker child process whose Slack outbound half posts to the same
FakeSlackApi, on the session's Temporal dev server. Requests are signed with the signing secret
exactly as Slack signs them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from agent.history import what_survives
from agent.models import ConversationOutcome
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from agent.stores.ledger import Ledger
from bot.conversations import Routed
from bot.slack.render import APPROVE_ACTION_ID, METADATA_EVENT_TYPE
from harness.conditions import wait_for
from harness.fakes.slack_api import signed_headers
from harness.owner import refunds_made
from tests.support.slack_app import ADMIN, CHANNEL, OTHER_CHANNEL, SUPPORT
from tests.support.slack_e2e import NO_PROXY, STRANGER, TEAM, slack_e2e


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in NO_PROXY:
        monkeypatch.delenv(name, raising=False)


async def test_a_slack_conversation_from_first_message_to_one_refund(
    temporal_env: WorkflowEnvironment, tmp_path: Path, no_proxy: None
) -> None:
    async with slack_e2e(temporal_env, tmp_path) as e2e:
        granted = await e2e.command("/refund-grant", "<@U0SAM|sam> refund_approver 1000")
        assert granted.startswith("Granted refund_approver to sam (limit $1,000.00)"), granted

        # A customer posts in the support channel: the thread opens on that message.
        root_ts, wid = await e2e.open("please refund order 4500")
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
            "please refund order 4500"
        ]  # nothing at the channel's top level but the customer's message

        # The retry, the edit and the bots never became answers.
        survivors = await what_survives(e2e.stack.client, wid)
        assert survivors.answers == {"item_opened": "Yes", "damage": "Split seam"}
        assert [m.text for m in e2e.router.messages] == [
            "please refund order 4500",
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

"""A dependency's outage delays a conversation, never ends it.

For each dependency in turn (the model API, the Slack approver group read before a refund,
Stripe), the fake at its network edge fails with HTTP 5xx for longer than the step's quick
retries: the thread is told once that the request waits on something on our side,
/refund-status names what it waits on (read with no Worker involved), and once the dependency is
back the conversation finishes by itself, with one refund and no question asked twice.
A failure no retry can fix still ends the conversation at once (tests/test_model_decider.py,
tests/test_stripe_refund.py).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import SecretStr

from agent.history import what_survives
from agent.models import Actor, Timing
from agent.sayings import WAITING
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from agent.stripe_setup import create_test_payments
from agent.workflow import RefundConversation
from bot.local.thread_store import LocalThreadStore
from bot.slack.grants import SlackUserGroupGrants
from harness.conditions import wait_for
from harness.conversation import LocalConversation
from harness.fakes.openai_api import FakeOpenAI
from harness.fakes.slack_api import FakeSlackApi
from harness.fakes.stripe_api import FakeStripe
from harness.inproc import running_worker
from harness.owner import refunds_made

# Quick retries of two seconds: an outage of a few seconds is one the conversation must wait out.
QUICK = Timing(
    quick_retry=timedelta(seconds=2),
    outage_patience=timedelta(minutes=5),
    hold_timeout=timedelta(minutes=5),
)
OUTAGE_S = 6.0
APPROVER = Actor(platform="slack", user_id="U0SAM", display_name="Sam")


async def _waiting_on(client, conv: LocalConversation, what: str) -> str:
    """Once the thread says it waits: /refund-status's line about what it waits on."""
    await wait_for(
        lambda: _said(conv, WAITING), timeout=60, what="the waiting notice in the thread"
    )
    handle = conv.handle
    assert handle is not None

    async def line() -> str | None:
        found = (await what_survives(client, handle.id)).waiting_on
        return found if found and what in found else None

    return await wait_for(line, timeout=60, what=f"status to say it waits on {what}")


async def _said(conv: LocalConversation, text: str) -> bool:
    return any(m.text == text for m in await conv.bot_messages())


def _told_once(texts: list[str]) -> None:
    assert texts.count(WAITING) == 1, texts
    asked = [t for t in texts if t.endswith("?")]
    assert len(asked) == len(set(asked)), f"a question asked twice: {texts}"


async def test_the_model_api_down_delays_the_decision(client, tmp_path) -> None:
    async with FakeOpenAI() as model:
        settings = AgentSettings(
            _env_file=None,
            data_dir=tmp_path,
            openai_api_key=SecretStr(model.api_key),
            openai_base_url=model.api_url,
        )
        store = LocalThreadStore(database_for(settings))
        async with running_worker(client, settings, store) as tq:
            conv = LocalConversation(client, store, tq)
            model.fail_next(10**6)  # down: every call answered with the API's 500
            handle = await conv.open("please refund order 1234", decider="openai", timing=QUICK)
            line = await _waiting_on(client, conv, "the model")
            assert "decide_next_step" in line and "attempt" in line
            await asyncio.sleep(OUTAGE_S)
            model.fail_next(0)  # back
            last = await conv.answer_until_decided(timeout=120)
            outcome = await asyncio.wait_for(handle.result(), 120)
    assert outcome.status == "refunded", last.text
    _told_once([m.text for m in await conv.bot_messages()])
    assert len(await refunds_made(settings)) == 1


async def test_the_approver_group_down_at_authorization_delays_the_refund(
    client, agent_settings, threads
) -> None:
    async with FakeSlackApi() as slack:
        slack.add_usergroup("S0APPROVERS", [APPROVER.user_id])
        grants = SlackUserGroupGrants(
            slack.app_settings(
                signing_secret="s", support_channel="C0SUPPORT", approver_group="S0APPROVERS"
            ),
            GrantStore(database_for(agent_settings)),
        )
        async with running_worker(
            client, agent_settings, threads, grant_sources={"slack": grants}
        ) as tq:
            conv = LocalConversation(client, threads, tq)
            handle = await conv.open("please refund order 4500", timing=QUICK)
            assert (await conv.answer_until_decided()).kind == "escalation"
            slack.fail("usergroups.users.list", "internal_error", times=10**6, status=500)
            await conv.click("approve", APPROVER, round=1)
            await _waiting_on(client, conv, "the role grants")
            await asyncio.sleep(OUTAGE_S)
            slack._faults.clear()  # back
            outcome = await asyncio.wait_for(handle.result(), 120)
        await grants.close()
    assert outcome.status == "refunded"
    _told_once([m.text for m in await conv.bot_messages()])
    assert len(await refunds_made(agent_settings)) == 1


async def test_stripe_down_delays_the_refund_with_one_idempotency_key(client, tmp_path) -> None:
    async with FakeStripe() as stripe:
        settings = AgentSettings(
            _env_file=None,
            data_dir=tmp_path,
            stripe_api_key=SecretStr(stripe.api_key),
            stripe_api_base=stripe.url,
        )
        threads = LocalThreadStore(database_for(settings))
        async with running_worker(client, settings, threads) as tq:
            await create_test_payments(settings)
            conv = LocalConversation(client, threads, tq)
            # Stripe answers the lookups (it owns the refunds they read), then goes down right
            # before the refund: held there, the conversation is released into the outage.
            handle = await conv.open("please refund order 1234", hold=True, timing=QUICK)
            for answer in ("Yes", "Split seam"):
                await conv.next_bot_message()
                await conv.reply(answer)
            await conv.wait_phase("held_before_refund")
            stripe.fail_next(10**6)
            await handle.signal(RefundConversation.release)
            await _waiting_on(client, conv, "the refund's owner")
            await asyncio.sleep(OUTAGE_S)
            stripe.fail_next(0)  # back
            outcome = await asyncio.wait_for(handle.result(), 120)
    assert outcome.status == "refunded"
    _told_once([m.text for m in await conv.bot_messages()])
    posts = [
        r
        for r in stripe.requests
        if r.method == "POST" and r.params.get("metadata[temporal_workflow_id]") == handle.id
    ]
    assert len(posts) > 2 and len({r.idempotency_key for r in posts}) == 1
    made = [
        r for r in stripe.refunds.values() if r["metadata"].get("temporal_workflow_id") == handle.id
    ]
    assert len(made) == 1

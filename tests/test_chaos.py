"""The chaos drill, small (bench/chaos.py runs it for minutes): conversations of every kind while
random faults hit every component of a real deployment, on each backend; the owners' records say
nothing was lost, done twice or left behind. The last test is one moment of it on its own: a bot
SIGKILLed right after it acknowledged a message while Temporal was down.
"""

from __future__ import annotations

import random
from pathlib import Path

import aiohttp
import pytest

from agent.stores.databases import database_for
from bot.inbox import Inbox
from harness.chaos.audit import QUESTIONS, decoded_events, delivered_message_ids
from harness.chaos.deployment import CHANNEL, TEAM, deployed
from harness.chaos.drill import ChaosConfig, run_chaos
from harness.chaos.edge import SlackEdge
from harness.chaos.faults import OUTAGES, fault_kinds
from harness.chaos.stories import steps
from harness.conditions import wait_for
from harness.crowd import place_crowd
from harness.fakes.slack_api import SlackSender


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.timeout(300)
async def test_conversations_of_every_kind_survive_faults_on_every_component(
    backend: str,
) -> None:
    lines: list[str] = []
    report = await run_chaos(ChaosConfig.small(backend), say=lines.append)  # type: ignore[arg-type]
    told = "\n".join([*lines, *report.lines()])
    for kind in (*fault_kinds(backend), *OUTAGES):  # type: ignore[arg-type]
        assert report.survived[kind] >= 1, f"no {kind}:\n{told}"
    assert report.violations == [], told
    # Two of each story: auto, escalated and down refunded; revoked declined; denied denied.
    assert report.outcomes == {"refunded": 6, "declined": 2, "denied": 2}, told
    assert report.refunds == 6, told


@pytest.mark.timeout(240)
async def test_an_acknowledged_message_survives_a_bot_sigkill_while_temporal_is_down(
    tmp_path: Path,
) -> None:
    """Temporal stopped; the customer's answer acknowledged by the bot with HTTP 200 (Slack will
    not send it again); the bot SIGKILLed at once; Temporal and the bot started again on the same
    data. The answer must reach the conversation, once: the agent asks its next question. The
    bot's inbox holds it from before the 200 (bot/conversations.py, Router.keep) and delivers it
    when Temporal answers."""
    async with (
        deployed("sqlite", quick_retry=30.0, restart_after=1.0, root=tmp_path) as deployment,
        aiohttp.ClientSession() as http,
    ):
        (shopper,) = await place_crowd(deployment.settings, 1, prefix="U0LOST", platform="slack")
        await deployment.start()
        edge = SlackEdge(deployment.bots, http, random.Random(1), deployment.slack)
        sender = SlackSender(deployment.slack)
        user = shopper.actor.user_id
        opening = sender.post(CHANNEL, shopper.opening, user=user)
        thread = opening.payload["event"]["ts"]
        await edge.deliver(opening, kind="message", key=opening.payload["event_id"])
        first = await wait_for(
            lambda: steps(deployment, thread), timeout=60, what="the first question"
        )
        assert first[0]["text"] == QUESTIONS[0][1]

        await deployment.temporal.kill()
        answer = sender.post(CHANNEL, "Yes", user=user, thread_ts=thread)
        ack = await edge.deliver(answer, kind="message", key=answer.payload["event_id"])
        assert ack.attempts == 1  # acknowledged with HTTP 200 at once, Temporal down
        (bot,) = deployment.bots
        # Killed the moment it acknowledged: what it acknowledged is durable or lost now. The
        # service manager starts it again; it serves once Temporal answers.
        bot.service.kill()
        await deployment.temporal.start()  # on the same database file
        await deployment.ready()

        workflow_id = f"slack-{TEAM}-{CHANNEL}-{thread}"
        inbox = Inbox(database_for(deployment.settings))
        assert deployment.client is not None
        client = deployment.client

        async def delivered() -> list[str] | None:
            """The history's message ids once the answer is in it, the second question is in
            the thread and the inbox holds nothing more to deliver (no repeat is on its way)."""
            taken = delivered_message_ids(await decoded_events(client, workflow_id))
            if answer.payload["event"]["ts"] not in taken or len(steps(deployment, thread)) < 2:
                return None
            return taken if (await inbox.depth()).waiting == 0 else None

        taken = await wait_for(
            delivered,
            timeout=60,
            what=f"the answer acknowledged at {ack.wall:.3f} by {ack.bot} in {workflow_id}",
        )
        assert taken.count(answer.payload["event"]["ts"]) == 1, taken  # delivered once
        asked = [post["text"] for post in steps(deployment, thread)]
        assert asked == [q for _, q in QUESTIONS], asked  # each question asked once
    assert deployment.problems == []

"""The chaos drill, small (bench/chaos.py runs it for minutes): conversations of every kind while
random faults hit every component of a real deployment, on each backend; the owners' records say
nothing was lost, done twice or left behind.

The small drill spares the moments in which today's code loses a message it has acknowledged
(ChaosConfig.spare). The last test here is one of them on its own: it fails until the bot keeps a
message in its inbox before it acknowledges it to the platform.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path

import aiohttp
import pytest

from harness.chaos.audit import QUESTIONS, decoded_events, signalled_message_ids
from harness.chaos.deployment import CHANNEL, TEAM, Deployment, deployed
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
    assert report.messages_while_down >= 1, told  # acknowledged while Temporal was down


@pytest.mark.timeout(240)
async def test_an_acknowledged_message_survives_a_bot_sigkill_while_temporal_is_down(
    tmp_path: Path,
) -> None:
    """Temporal stopped; the customer's answer acknowledged by the bot with HTTP 200 (Slack will
    not send it again); the bot SIGKILLed 2 s later; Temporal and the bot started again on the
    same data. The answer must reach the conversation, once: the agent asks its next question.

    Today the bot hands an acknowledged message to the inbox only once its call to Temporal has
    failed (about 6 s with Temporal down), so a SIGKILL before that loses it."""
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
        await asyncio.sleep(2.0)
        (bot,) = deployment.bots
        bot.service.kill()  # the service manager starts it again, once Temporal answers
        await asyncio.sleep(1.0)
        await deployment.temporal.start()  # on the same database file
        await deployment.ready()

        asked = await _asked_after(deployment, thread, timeout=20.0)
        workflow_id = f"slack-{TEAM}-{CHANNEL}-{thread}"
        assert deployment.client is not None
        taken = signalled_message_ids(await decoded_events(deployment.client, workflow_id))
        assert answer.payload["event"]["ts"] in taken and asked == [q for _, q in QUESTIONS], (
            f"the answer acknowledged at {ack.wall:.3f} by {ack.bot} never reached "
            f"{workflow_id}: its history holds the messages {taken}, the thread {asked}"
        )
    assert deployment.problems == []


async def _asked_after(deployment: Deployment, thread: str, timeout: float) -> list[str]:
    """The agent's questions in the thread once a second one is there, or after `timeout`."""
    with contextlib.suppress(AssertionError):
        await wait_for(
            lambda: len(steps(deployment, thread)) >= 2, timeout=timeout, what="a second step"
        )
    await asyncio.sleep(1.0)  # a repeat would come right after
    return [post["text"] for post in steps(deployment, thread)]

"""DiscordStage against the fake Discord API: what Discord would show of /refund-demo's story.

The stage sends with discord.py's HTTPClient (RoutedHTTPClient, logged in as the gateway client
is); the agent's own posts go through the Worker's DiscordThreadPoster, as in the Worker process.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from temporalio.testing import WorkflowEnvironment

from agent.models import Actor, MessageKey, MessageKind, OutboundMessage, ThreadRef
from agent.policy import QUESTIONS
from bot.commands import ChannelRef
from bot.discord.outbound import DiscordThreadPoster, RoutedHTTPClient
from bot.ids import workflow_id_for
from demo.discord_stage import MESSAGES_PAGE_SIZE, TONE_COLOURS, DiscordStage
from demo.side_by_side import Pace, SideBySide, StoryParts
from demo.stage import Column, Frame
from demo.terminal import SupervisorInProcess
from harness.fakes.discord_api import MESSAGES_ROUTE, THREADS_ROUTE, FakeDiscordAPI
from harness.stack import child_env, supervised_stack
from tests.support.discord_guild import CUSTOMER, GUILD, SUPPORT, seed_guild

CHANNEL = ChannelRef(platform="discord", workspace=str(GUILD), channel=str(SUPPORT))
STORY_TIMEOUT = 240.0  # the story's own steps each wait at most 60 s
DEMO_CUSTOMER = Actor(platform="discord", user_id="demo-nyghtowl-1", display_name="Nyghtowl")


@pytest.fixture
async def api() -> AsyncIterator[FakeDiscordAPI]:
    async with FakeDiscordAPI() as fake:
        seed_guild(fake)
        yield fake


@pytest.fixture
async def stage(api: FakeDiscordAPI) -> AsyncIterator[DiscordStage]:
    http = RoutedHTTPClient(
        asyncio.get_running_loop(), base_url=api.api_url, max_ratelimit_timeout=None
    )
    me = await http.static_login(api.token)
    try:
        yield DiscordStage(http, int(me["id"]))
    finally:
        await http.close()


@pytest.fixture
async def poster(api: FakeDiscordAPI) -> AsyncIterator[DiscordThreadPoster]:
    async with DiscordThreadPoster(SecretStr(api.token), api_url=api.api_url) as p:
        yield p


class Agent:
    """The agent's posts in a thread, as the Worker (or the plain loop) makes them."""

    def __init__(self, poster: DiscordThreadPoster, thread: ThreadRef) -> None:
        self.poster, self.thread, self.seq = poster, thread, 0

    async def post(self, kind: MessageKind, text: str) -> None:
        self.seq += 1
        key = MessageKey(workflow_id=workflow_id_for(self.thread), run_id="run-1", seq=self.seq)
        await self.poster.post(OutboundMessage(thread=self.thread, key=key, kind=kind, text=text))


def embeds(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [embed for m in messages for embed in m["embeds"]]


async def test_open_thread_posts_a_root_and_opens_a_conversation_thread_on_it(
    api: FakeDiscordAPI, stage: DiscordStage
) -> None:
    title = "With Temporal: the same loop as a Temporal Workflow"
    thread, root_id = await stage.open_thread(
        CHANNEL, title, DEMO_CUSTOMER, "please refund order 1234"
    )

    [root] = api.messages(SUPPORT)
    assert root["id"] == root_id
    assert root["content"] == "**Nyghtowl:** please refund order 1234"
    assert [e["title"] for e in root["embeds"]] == [title]
    assert root["mentions"] == [] and root["mention_everyone"] is False
    [opened] = api.requests_to(THREADS_ROUTE)
    assert opened.path == f"/channels/{SUPPORT}/messages/{root_id}/threads"
    assert opened.json["name"] == title
    # The ThreadRef a customer's own thread has: the Workflow ID is derived the same way.
    assert thread == ThreadRef(
        platform="discord", workspace=str(GUILD), channel=str(SUPPORT), thread=root_id
    )
    channel = api.channel(thread.thread)
    assert channel is not None and channel["type"] == 11 and channel["parent_id"] == str(SUPPORT)
    assert workflow_id_for(thread) == f"discord-{GUILD}-{root_id}"


async def test_lines_and_frames_show_in_the_thread_and_the_summary_in_the_channel(
    api: FakeDiscordAPI, stage: DiscordStage
) -> None:
    thread, root_id = await stage.open_thread(CHANNEL, "Without Temporal", DEMO_CUSTOMER, "hi")
    line_id = await stage.post_line(thread, DEMO_CUSTOMER, "Split seam @everyone <@1>")
    await stage.post_frame(thread, Frame("PROCESS GONE", ("Its *answers* are gone.",), tone="gone"))
    await stage.post_frame(thread, Frame("WHAT SURVIVES", ("answers: 2",), tone="survives"))
    summary = Frame(
        "SAME CRASH, TWO OUTCOMES",
        ("ok: every count is the docs page's.",),
        columns=(
            Column("Without Temporal", ("questions asked twice: 2", "refunds made: 0")),
            Column("With Temporal", ("questions asked twice: 0", "refunds made: 1")),
        ),
        tone="good",
    )
    await stage.post_frame(CHANNEL, summary)

    line, gone, survives = api.messages(thread.thread)
    assert line["id"] == line_id
    assert line["content"] == "**Nyghtowl:** Split seam @everyone <@1>"
    assert line["embeds"] == [] and line["mentions"] == [] and not line["mention_everyone"]
    assert (gone["content"], survives["content"]) == ("", "")
    [gone_embed] = gone["embeds"]
    assert gone_embed["title"].endswith("PROCESS GONE")
    assert gone_embed["description"] == "Its **answers** are gone."  # Slack's bold, Discord's
    assert gone_embed["color"] == TONE_COLOURS["gone"]
    assert survives["embeds"][0]["color"] == TONE_COLOURS["survives"]

    root, top = api.messages(SUPPORT)  # the summary sits at the channel's top level
    assert root["id"] == root_id
    [embed] = top["embeds"]
    assert embed["title"].endswith("SAME CRASH, TWO OUTCOMES")
    assert embed["color"] == TONE_COLOURS["good"]
    assert embed["fields"] == [
        {
            "name": "Without Temporal",
            "value": "questions asked twice: 2\nrefunds made: 0",
            "inline": True,
        },
        {
            "name": "With Temporal",
            "value": "questions asked twice: 0\nrefunds made: 1",
            "inline": True,
        },
    ]
    for request in api.requests_to(MESSAGES_ROUTE):
        assert request.json["allowed_mentions"] == {"parse": []}


async def test_questions_are_the_agents_questions_among_lines_frames_and_notices(
    api: FakeDiscordAPI, stage: DiscordStage, poster: DiscordThreadPoster
) -> None:
    thread, _ = await stage.open_thread(CHANNEL, "Without Temporal", DEMO_CUSTOMER, "order 1234")
    agent = Agent(poster, thread)
    opened, damage = QUESTIONS["item_opened"], QUESTIONS["damage"]
    assert await stage.questions(thread) == []

    await agent.post("question", opened)
    await stage.post_line(thread, DEMO_CUSTOMER, "Yes")
    await agent.post("question", damage)
    await stage.post_line(thread, DEMO_CUSTOMER, damage)  # a line that quotes a question
    await agent.post("info", "Next: issue the refund.")
    await stage.post_frame(thread, Frame("PROCESS GONE", (f"It asked: {opened}",), tone="gone"))
    api.user_message(int(thread.thread), CUSTOMER, opened)  # a person typing a question's words
    await agent.post("info", "I have no record of our conversation. Please start the return again.")
    await agent.post("question", opened)  # asked again: the plain loop forgot
    await agent.post("outcome", "Your refund is complete.")

    assert await stage.questions(thread) == [opened, damage, opened]


async def test_questions_are_read_across_pages_oldest_first(
    api: FakeDiscordAPI, stage: DiscordStage, poster: DiscordThreadPoster
) -> None:
    thread, _ = await stage.open_thread(CHANNEL, "With Temporal", DEMO_CUSTOMER, "order 1234")
    agent = Agent(poster, thread)
    await agent.post("question", QUESTIONS["item_opened"])
    for i in range(MESSAGES_PAGE_SIZE):
        await stage.post_line(thread, DEMO_CUSTOMER, f"line {i}")
    await agent.post("question", QUESTIONS["damage"])

    assert await stage.questions(thread) == [QUESTIONS["item_opened"], QUESTIONS["damage"]]
    reads = api.requests_to("GET /channels/{channel_id}/messages")
    assert len(reads) == 2  # two pages of at most 100


async def test_the_whole_story_on_discord(
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    api: FakeDiscordAPI,
    stage: DiscordStage,
) -> None:
    """The supervised Worker and the plain loop post to the fake Discord; the story runs on a
    zero timer; its summary is counted from Discord's threads and the other owners."""
    discord = {"DISCORD_TOKEN": api.token, "DISCORD_API_URL": api.api_url}
    async with supervised_stack(temporal_env, tmp_path, discord) as stack:
        assert stack.supervisor is not None
        parts = StoryParts(
            stack.client,
            stack.temporal,
            stack.settings,
            stack.inbox,
            SupervisorInProcess(stack.supervisor),
            child_env(tmp_path, discord),  # as running_router hands the Worker's env on
        )
        story = SideBySide(parts, stage, CHANNEL, Pace(0.0, auto=True))
        summary = await asyncio.wait_for(story.run(), STORY_TIMEOUT)

    assert summary.problems() == []
    assert story.without is not None and story.durable is not None
    without, durable = story.without.thread, story.durable.thread
    # What Discord shows: two roots and the summary in the channel, each side's frames in its
    # thread, the agent's questions asked twice without Temporal and once with it.
    roots = [m for m in api.messages(SUPPORT) if m.get("thread")]
    assert [m["id"] for m in roots] == [without.thread, durable.thread]
    summary_post = api.messages(SUPPORT)[-1]
    [embed] = summary_post["embeds"]
    assert embed["title"].endswith("SAME CRASH, TWO OUTCOMES")
    assert [f["name"] for f in embed["fields"]] == ["Without Temporal", "With Temporal"]
    assert "questions asked twice: 2" in embed["fields"][0]["value"]
    assert "refunds made: 1" in embed["fields"][1]["value"]
    frames = {
        thread.thread: [e["title"] for e in embeds(api.messages(thread.thread))]
        for thread in (without, durable)
    }
    assert any(t.endswith("PROCESS GONE") for t in frames[without.thread])
    assert any(t.endswith("WORKER GONE") for t in frames[durable.thread])
    assert any(t.endswith("WHAT SURVIVES") for t in frames[durable.thread])
    asked = [QUESTIONS["item_opened"], QUESTIONS["damage"]]
    assert await stage.questions(without) == asked * 2
    assert await stage.questions(durable) == asked

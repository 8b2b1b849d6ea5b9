"""/refund-demo: the same crash without and with Temporal, in two threads, counted from the owners.

Each story runs on the real stack: the session's Temporal, a supervised Worker child that is really
SIGKILLed, and the plain loop in a process of its own that is really SIGKILLed too. The counts are
read here from the owners themselves (the thread, the ledger), not taken from the story's summary.
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient
from temporalio.testing import WorkflowEnvironment

from agent.models import Actor
from agent.policy import QUESTIONS
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from bot.commands import ChannelRef
from bot.local.terminal import PEOPLE, LocalChannel
from bot.local.thread_store import LocalMessage, LocalThreadStore
from bot.slack.render import metadata_payload
from demo.command import SideBySideDemos
from demo.local_stage import LocalStage
from demo.pace import DemoPace
from demo.side_by_side import StoryParts
from demo.slack_stage import SlackStage
from demo.stage import Frame
from harness.conditions import wait_for
from harness.fakes.slack_api import FakeSlackApi
from harness.owner import refunds_made
from harness.stack import supervised_stack
from refund_bot.wiring import SupervisorsOverTemporal, local_thread_store
from tests.support.slack_e2e import ADMIN, CHANNEL, STRANGER, slack_e2e

ASKED = (QUESTIONS["item_opened"], QUESTIONS["damage"])
STORY = 120  # seconds: a whole story, a Worker restart and two plain processes included


def _plain_loops_of(data_dir: Path) -> list[int]:
    """Pids of plain-loop processes started for this data directory (by their call log path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"demo.plain_loop" in argv and any(str(data_dir).encode() in a for a in argv):
            found.append(int(entry.name))
    return found


async def _thread_of(threads: LocalThreadStore, title: str) -> str:
    async def opened() -> str | None:
        for message in await threads.messages():
            if message.kind == "frame" and title in message.text:
                return message.thread_id
        return None

    return await wait_for(opened, timeout=60, what=f"the thread {title!r}")


async def test_a_presenter_tells_both_demos_in_the_terminal(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with supervised_stack(temporal_env, tmp_path) as stack:
        threads = local_thread_store(stack.settings)
        out = io.StringIO()
        channel = LocalChannel(threads, stack.router, stack.commands, out=out)
        await GrantStore(database_for(stack.settings)).grant(
            PEOPLE["presenter"], "presenter", None, by=Actor(platform="local", user_id="seed")
        )

        # Someone who is not a presenter is told so, and nothing starts.
        channel.me = PEOPLE["customer"]
        await channel.handle("/refund-demo")
        assert "this command needs the presenter role" in out.getvalue()
        assert await threads.messages() == []
        assert not (tmp_path / "side-by-side").exists()

        channel.me = PEOPLE["presenter"]
        worker_before = stack.supervisor.pid if stack.supervisor else None
        await channel.handle("/refund-demo")
        assert "Two threads open in this channel" in out.getvalue()
        naive = await _thread_of(threads, "Without Temporal")
        durable = await _thread_of(threads, "With Temporal")

        # Each moment waits for the presenter: the first questions, then nothing more until next.
        async def asked_in_both(count: int) -> bool:
            for thread in (naive, durable):
                asked = [m for m in await threads.messages(thread) if m.kind == "question"]
                if len(asked) < count:
                    return False
            return True

        await wait_for(lambda: asked_in_both(1), timeout=60, what="the first question in both")
        await channel.handle("/refund-demo crash")
        assert "The crash comes once both agents chose the refund" in out.getvalue()
        # Another bot replica on the same database takes the presenter's next.
        replica = SideBySideDemos(
            StoryParts(
                stack.client,
                stack.temporal,
                stack.settings,
                stack.inbox,
                SupervisorsOverTemporal(stack.client, stack.temporal),
            ),
            DemoPace(database_for(stack.settings)),
        )
        here = ChannelRef(platform="local", workspace="local", channel="support")
        reply = await replica.command("next", LocalStage(threads), here)
        assert reply.text == "Next: the agent's first question, answered in both.", reply

        async def answered_in_both() -> bool:
            for thread in (naive, durable):
                lines = [m.text for m in await threads.messages(thread) if not m.author_is_bot]
                if "Yes" not in lines:
                    return False
            return True

        await wait_for(answered_in_both, timeout=60, what="the customer's first answer in both")
        await channel.handle("/refund-demo auto 0")

        async def summary() -> LocalMessage | None:
            for message in await threads.messages():
                if message.kind == "frame" and "SAME CRASH, TWO OUTCOMES" in message.text:
                    return message
            return None

        told = await wait_for(summary, timeout=STORY, what="the side-by-side summary")
        assert "ok: every count is the docs page's." in told.text, told.text

        # From the owners: the threads hold the questions as posted, the ledger the refunds.
        naive_asked, durable_asked = [
            Counter(m.text for m in await threads.messages(t) if m.kind == "question")
            for t in (naive, durable)
        ]
        assert naive_asked == {ASKED[0]: 2, ASKED[1]: 2}
        assert durable_asked == {ASKED[0]: 1, ASKED[1]: 1}
        naive_text = "\n".join(m.text for m in await threads.messages(naive))
        durable_text = "\n".join(m.text for m in await threads.messages(durable))
        assert "== PROCESS GONE ==" in naive_text
        assert "Please start the return again." in naive_text
        assert "== THE CUSTOMER STARTS OVER ==" in naive_text
        assert "== WORKER GONE ==" in durable_text
        assert "customer answers: 2" in durable_text and "completed lookups: 2" in durable_text
        assert "next action: issue refund" in durable_text
        assert "Your refund is complete" in durable_text
        assert "== NO REPEATED QUESTIONS · NO LOOP RESTART ==" in durable_text
        refunds = await refunds_made(stack.settings)
        assert [r.workflow_id for r in refunds] == [f"local-local-support-{durable}"]
        # The Worker was really replaced, and the plain loop's processes are gone.
        assert stack.supervisor is not None and stack.supervisor.pid != worker_before
        await wait_for(
            lambda: not _plain_loops_of(tmp_path), timeout=10, what="the plain loops to stop"
        )
        for line in ("questions asked twice: 2", "refunds made: 0", "refunds made: 1"):
            assert line in told.text

        # The story is over, so another may start; `stop` ends it and its plain process.
        board = DemoPace(database_for(stack.settings))
        await wait_for(lambda: _no_story(board), timeout=10, what="the story's claim to go")
        await channel.handle("/refund-demo")

        async def second_story() -> list[int] | str:
            # Its plain loop, or why the story stopped (the frame it posts) for the failure.
            for message in await threads.messages():
                if message.kind == "frame" and "THE DEMO STOPPED" in message.text:
                    return message.text
            return _plain_loops_of(tmp_path)

        started = await wait_for(second_story, timeout=STORY, what="a new plain loop")
        assert isinstance(started, list), (started, out.getvalue())
        await channel.handle("/refund-demo stop")
        assert "The side-by-side demo stops." in out.getvalue()
        await wait_for(
            lambda: not _plain_loops_of(tmp_path), timeout=30, what="the stopped story's loop"
        )
        await wait_for(lambda: _no_story(board), timeout=10, what="the stopped story's claim")


async def _no_story(board: DemoPace) -> bool:
    return await board.running() is None


def _headers(message: dict[str, Any]) -> list[str]:
    return [b["text"]["text"] for b in message.get("blocks") or [] if b.get("type") == "header"]


async def test_a_presenter_tells_both_demos_in_slack(
    temporal_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: Any
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with slack_e2e(temporal_env, tmp_path) as e2e:
        refused = await e2e.command("/refund-demo", user=STRANGER, channel=CHANNEL)
        assert "this command needs the presenter role" in refused
        assert e2e.slack.history(CHANNEL) == []

        nothing = await e2e.command("/refund-demo", "auto 0", user=ADMIN, channel=CHANNEL)
        assert nothing == "No side-by-side demo is running: /refund-demo starts one."
        started = await e2e.command("/refund-demo", user=ADMIN, channel=CHANNEL)
        assert "Two threads open in this channel" in started
        await e2e.command("/refund-demo", "auto 0", user=ADMIN, channel=CHANNEL)

        async def summary() -> dict[str, Any] | None:
            for message in e2e.slack.history(CHANNEL):
                if any("SAME CRASH, TWO OUTCOMES" in h for h in _headers(message)):
                    return message
            return None

        told = await wait_for(summary, timeout=STORY, what="the summary in the channel")
        assert "thread_ts" not in told or told["thread_ts"] == told["ts"]  # top level
        fields = next(b["fields"] for b in told["blocks"] if b.get("fields"))
        without, durable = (field["text"] for field in fields)
        assert without.startswith("*Without Temporal*") and durable.startswith("*With Temporal*")
        assert "questions asked twice: 2" in without and "refunds made: 0" in without
        assert "questions asked twice: 0" in durable and "refunds made: 1" in durable

        roots = {
            header: m
            for m in e2e.slack.history(CHANNEL)
            if m.get("thread_ts", m["ts"]) == m["ts"]  # top level
            for header in _headers(m)
        }
        naive_root = next(m for h, m in roots.items() if "Without Temporal" in h)
        durable_root = next(m for h, m in roots.items() if "With Temporal" in h)
        # What Slack holds in each thread: the agent's questions by their metadata, the frames.
        asked = {
            name: Counter(
                m["text"]
                for m in e2e.slack.thread(CHANNEL, root["ts"])
                if metadata_payload(m).get("kind") == "question"
            )
            for name, root in (("naive", naive_root), ("durable", durable_root))
        }
        assert asked["naive"] == {ASKED[0]: 2, ASKED[1]: 2}
        assert asked["durable"] == {ASKED[0]: 1, ASKED[1]: 1}
        naive_headers, durable_headers = (
            [h for m in e2e.slack.thread(CHANNEL, root["ts"]) for h in _headers(m)]
            for root in (naive_root, durable_root)
        )
        assert any("PROCESS GONE" in h for h in naive_headers)
        assert any("WORKER GONE" in h for h in durable_headers)
        assert any("WHAT SURVIVES" in h for h in durable_headers)
        assert any("NO REPEATED QUESTIONS" in h for h in durable_headers)
        refunds = await refunds_made(e2e.stack.settings)
        assert [r.workflow_id for r in refunds] == [
            f"slack-{e2e.slack.team_id}-{CHANNEL}-{durable_root['ts']}"
        ]
        await wait_for(
            lambda: not _plain_loops_of(tmp_path), timeout=10, what="the plain loops to stop"
        )


async def test_the_slack_stage_waits_out_a_rate_limit_and_escapes_what_it_quotes(
    monkeypatch: Any,
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with FakeSlackApi(team_id="T0STAGE") as slack:
        stage = SlackStage(AsyncWebClient(token=slack.token, base_url=slack.url))
        customer = Actor(platform="slack", user_id="demo-1", display_name="Nyghtowl")
        here = ChannelRef(platform="slack", workspace="T0STAGE", channel=CHANNEL)
        # chat.postMessage allows about one message a second per channel; the story posts faster.
        slack.rate_limit("chat.postMessage", times=2, retry_after=1)
        thread, root = await stage.open_thread(here, "With Temporal", customer, "refund <!channel>")
        assert (thread.channel, thread.thread) == (CHANNEL, root)
        lines = ("answers: 1 (damage <@U0ALL>)",)
        await stage.post_frame(thread, Frame("WHAT SURVIVES", lines, tone="survives"))
        (opened, frame) = slack.thread(CHANNEL, root)
        assert len(slack.calls_to("chat.postMessage")) == 4  # two refused, then both posted
        assert "&lt;!channel&gt;" in str(opened["blocks"]) and "<!channel>" not in str(opened)
        assert _headers(frame) == [":scroll: WHAT SURVIVES"]
        assert "damage &lt;@U0ALL&gt;" in str(frame["blocks"])

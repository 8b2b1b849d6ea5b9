"""Posts are tried inside the workflow task first; a platform that fails or stalls that try gets
the regular Activity, and the customer still reads each message once.

    _post -> local try (one attempt, LOCAL_POST_TIMEOUT) -> failed? -> post_to_thread Activity
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio.client import Client, WorkflowHandle

from agent.decoded_history import decoded_history
from agent.history import posted_message, steps_of
from agent.models import MessageEdit, OutboundMessage, PostedMessage
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from bot.local.thread_store import LocalThreadStore
from harness.conversation import LocalConversation
from harness.owner import refunds_made
from tests.support.silent_platform import SilentFirstPost
from worker.runner import build_worker


class TroubledPlatform:
    """The local platform, in trouble for its first post: it either fails before posting (an
    outage) or posts and then never answers (the answer lost on the way back)."""

    def __init__(self, threads: LocalThreadStore, *, posts_then_stalls: bool) -> None:
        self.threads = threads
        self.posts_then_stalls = posts_then_stalls
        self.calls = 0

    async def post(self, message: OutboundMessage) -> PostedMessage:
        self.calls += 1
        if self.calls > 1:
            return await self.threads.post(message)
        if not self.posts_then_stalls:
            raise ConnectionError("the platform is down")
        await self.threads.post(message)
        await asyncio.Event().wait()  # until the local try's timeout cancels this call
        raise AssertionError("not reached")

    async def edit(self, edit: MessageEdit) -> None:
        await self.threads.edit(edit)


async def _conversation(
    client: Client, settings: AgentSettings, platform: TroubledPlatform
) -> tuple[LocalConversation, WorkflowHandle]:
    task_queue = f"test-{uuid.uuid4().hex[:8]}"
    worker = await build_worker(client, task_queue, settings, {"local": platform})
    conv = LocalConversation(client, platform.threads, task_queue)
    async with worker:
        handle = await conv.open("please refund order 1234")
        await conv.answer_the_questions()
        assert (await handle.result()).status == "refunded"
    return conv, handle


async def _posts(client: Client, handle: WorkflowHandle) -> list[tuple[bool, str, bool | None]]:
    """(local?, the text posted or the failure, duplicate?) for every post step, in order."""
    history = await decoded_history(await handle.fetch_history(), client.data_converter)
    found = []
    for step in steps_of(history.events, client.data_converter):
        if step.name != "post_to_thread":
            continue
        message = posted_message(step)
        duplicate = step.result.duplicate if step.result is not None else None
        found.append((step.local, message.text if message else str(step.failed), duplicate))
    return found


async def test_a_platform_down_for_the_local_try_gets_the_post_from_the_activity(
    client, agent_settings
) -> None:
    platform = TroubledPlatform(
        LocalThreadStore(database_for(agent_settings)), posts_then_stalls=False
    )
    conv, handle = await _conversation(client, agent_settings, platform)
    posts = await _posts(client, handle)
    assert posts[0][0] and "the platform is down" in posts[0][1]
    assert posts[1] == (False, "Was the package opened?", False)
    # The next posts are tried locally again, the outcome's too.
    assert len(posts) > 2 and all(local for local, _, _ in posts[2:]), posts
    texts = [m.text for m in await conv.bot_messages()]
    assert texts.count("Was the package opened?") == 1
    assert [r.workflow_id for r in await refunds_made(agent_settings)] == [handle.id]


async def test_a_post_whose_answer_is_lost_is_not_posted_twice(client, agent_settings) -> None:
    platform = TroubledPlatform(
        LocalThreadStore(database_for(agent_settings)), posts_then_stalls=True
    )
    conv, handle = await _conversation(client, agent_settings, platform)
    posts = await _posts(client, handle)
    # The local try posted, then timed out; the Activity found that post by its key.
    assert posts[0][0] and posts[0][2] is None
    assert posts[1] == (False, "Was the package opened?", True)
    texts = [m.text for m in await conv.bot_messages()]
    assert texts.count("Was the package opened?") == 1
    assert texts[-1].startswith("Your refund is complete")


async def test_a_timed_out_local_post_replays_on_a_restarted_worker(client, agent_settings) -> None:
    """The platform does not answer the first post: its local try times out and the Activity
    posts the question. That Worker stops; a new one (no cache: it replays the history, the
    timed-out try included) takes the answers, and the conversation refunds with no workflow task
    failed."""
    threads = LocalThreadStore(database_for(agent_settings))
    platform = SilentFirstPost(threads)
    task_queue = f"test-{uuid.uuid4().hex[:8]}"
    conv = LocalConversation(client, threads, task_queue)
    async with await build_worker(client, task_queue, agent_settings, {"local": platform}):
        handle = await conv.open("please refund order 1234")
        assert (await conv.next_bot_message()).text == "Was the package opened?"
    async with await build_worker(client, task_queue, agent_settings, {"local": platform}):
        await conv.reply("Yes")
        assert (await conv.next_bot_message(timeout=30)).text == "What was damaged?"
        await conv.reply("Split seam")
        assert (await handle.result()).status == "refunded"
    posts = await _posts(client, handle)
    assert posts[0] == (True, "Activity timed out", None), posts
    assert posts[1] == (False, "Was the package opened?", False), posts
    history = await handle.fetch_history()
    failed_tasks = [
        e for e in history.events if e.HasField("workflow_task_failed_event_attributes")
    ]
    assert failed_tasks == [], failed_tasks

"""Every message is first tried inside the workflow task; a platform that fails or stalls that try
gets the regular Activity, under the same key, and the customer still reads each message once.

    a question -> the decide step that asks it tries it (LOCAL_POST_TIMEOUT) -> no post? -> Activity
    any other  -> _post's local try (one attempt, LOCAL_POST_TIMEOUT) -> failed?     -> Activity
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

import pytest
from temporalio.client import Client, WorkflowHandle

from agent.decoded_history import decoded_history
from agent.history import posted_message, steps_of
from agent.models import MessageEdit, MessageKind, OutboundMessage, PostedMessage
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from bot.local.thread_store import LocalThreadStore
from harness.conversation import SUPPORT, LocalConversation
from harness.owner import refunds_made
from tests.support.silent_platform import SilentFirstPost
from worker.runner import build_worker

QUESTION = "Was the package opened?"
# The order the policy refunds at once, and the one it escalates to a support agent.
REFUNDED, ESCALATED = "1234", "4500"


class TroubledPlatform:
    """The local platform, in trouble for its first post of `kind`: it either fails before posting
    (an outage) or posts and then never answers (the answer lost on the way back)."""

    def __init__(
        self, threads: LocalThreadStore, *, posts_then_stalls: bool, kind: MessageKind
    ) -> None:
        self.threads = threads
        self.posts_then_stalls = posts_then_stalls
        self.kind = kind
        self.troubled = False

    async def post(self, message: OutboundMessage) -> PostedMessage:
        if message.kind != self.kind or self.troubled:
            return await self.threads.post(message)
        self.troubled = True
        if not self.posts_then_stalls:
            raise ConnectionError("the platform is down")
        await self.threads.post(message)
        await asyncio.Event().wait()  # until the try's timeout cancels this call
        raise AssertionError("not reached")

    async def edit(self, edit: MessageEdit) -> None:
        await self.threads.edit(edit)


@dataclass(frozen=True)
class Post:
    """One post step read back from Event History."""

    step: str  # post_to_thread, or the decide step that posted its question
    local: bool  # made inside a workflow task
    kind: str | None  # None: a try that failed
    text: str  # what was posted, or the failure
    duplicate: bool | None  # the key had been posted before (None: a failed try)


async def _conversation(
    client: Client, settings: AgentSettings, platform: TroubledPlatform | SilentFirstPost
) -> tuple[LocalConversation, WorkflowHandle]:
    """The plush python's refund, escalated and approved when the platform troubles an
    escalation."""
    task_queue = f"test-{uuid.uuid4().hex[:8]}"
    worker = await build_worker(client, task_queue, settings, {"local": platform})
    conv = LocalConversation(client, platform.threads, task_queue)
    escalates = platform.kind == "escalation"
    async with worker:
        handle = await conv.open(f"please refund order {ESCALATED if escalates else REFUNDED}")
        await conv.answer_the_questions()
        if escalates:
            await conv.next_bot_message(timeout=30)  # the escalation, maybe after a try's 5 s
            await conv.click("approve", SUPPORT)
        assert (await handle.result()).status == "refunded"
    return conv, handle


async def _posts(client: Client, handle: WorkflowHandle) -> list[Post]:
    """Every post step, in order: post_to_thread's (its failed tries too) and the questions the
    decide step posted."""
    history = await decoded_history(await handle.fetch_history(), client.data_converter)
    found = []
    for step in steps_of(history.events, client.data_converter):
        message = posted_message(step)
        if step.name == "post_to_thread":
            posted: PostedMessage | None = step.result
        elif message is not None:  # a decide step that posted its question
            posted = step.result.posted
        else:
            continue
        found.append(
            Post(
                step=step.name,
                local=step.local,
                kind=message.kind if message else None,
                text=message.text if message else str(step.failed),
                duplicate=posted.duplicate if posted is not None else None,
            )
        )
    return found


def _of_kind(posts: list[Post], kind: MessageKind) -> list[Post]:
    """The posts of `kind`, each preceded by the failed try (if any) just before it."""
    at = next(i for i, p in enumerate(posts) if p.kind == kind)
    return posts[at - 1 : at + 1] if at and posts[at - 1].kind is None else posts[at : at + 1]


@pytest.mark.parametrize("kind", ["question", "escalation"])
async def test_a_platform_down_for_the_try_gets_the_post_from_the_activity(
    client, agent_settings, kind: MessageKind
) -> None:
    platform = TroubledPlatform(
        LocalThreadStore(database_for(agent_settings)), posts_then_stalls=False, kind=kind
    )
    conv, handle = await _conversation(client, agent_settings, platform)
    posts = await _posts(client, handle)
    *tried, activity = _of_kind(posts, kind)
    if kind == "question":
        # The decide step's try left no post: the Activity posts it, with no second local try.
        assert tried == [] and activity.step == "post_to_thread", posts
    else:
        [failed] = tried
        assert failed.local and "the platform is down" in failed.text, posts
    assert (activity.local, activity.duplicate) == (False, False), posts
    # The next posts are tried locally again, the next question by its decide step, the outcome's
    # too.
    later = posts[posts.index(activity) + 1 :]
    assert later and all(p.local for p in later), posts
    if kind == "question":
        assert [p.step for p in later if p.kind == "question"] == ["decide_next_step"], posts
    texts = [m.text for m in await conv.bot_messages()]
    assert sum(t.startswith(activity.text) for t in texts) == 1  # an escalation gets its outcome
    assert [r.workflow_id for r in await refunds_made(agent_settings)] == [handle.id]


@pytest.mark.parametrize("kind", ["question", "escalation"])
async def test_a_post_whose_answer_is_lost_is_not_posted_twice(
    client, agent_settings, kind: MessageKind
) -> None:
    platform = TroubledPlatform(
        LocalThreadStore(database_for(agent_settings)), posts_then_stalls=True, kind=kind
    )
    conv, handle = await _conversation(client, agent_settings, platform)
    posts = await _posts(client, handle)
    *tried, activity = _of_kind(posts, kind)
    if kind != "question":  # a question's try is the decide step's, and leaves no post step
        [failed] = tried
        assert failed.local and failed.duplicate is None, posts
    # The try posted, then timed out; the Activity found that post by its key.
    assert (activity.local, activity.duplicate) == (False, True), posts
    texts = [m.text for m in await conv.bot_messages()]
    assert sum(t.startswith(activity.text) for t in texts) == 1
    assert texts[-1].startswith("Your refund is complete")


async def test_a_timed_out_local_post_replays_on_a_restarted_worker(client, agent_settings) -> None:
    """The platform does not answer the escalation's post: its local try times out and the
    Activity posts it. That Worker stops; a new one (no cache: it replays the history, the
    timed-out try included) takes the approval, and the conversation refunds with no workflow
    task failed."""
    threads = LocalThreadStore(database_for(agent_settings))
    platform = SilentFirstPost(threads, kind="escalation")
    task_queue = f"test-{uuid.uuid4().hex[:8]}"
    conv = LocalConversation(client, threads, task_queue)
    async with await build_worker(client, task_queue, agent_settings, {"local": platform}):
        handle = await conv.open(f"please refund order {ESCALATED}")
        await conv.answer_the_questions()
        escalation = await conv.next_bot_message(timeout=30)
    assert platform.silent_for is not None and escalation.text == platform.silent_for.text
    async with await build_worker(client, task_queue, agent_settings, {"local": platform}):
        await conv.click("approve", SUPPORT)
        assert (await handle.result()).status == "refunded"
    posts = _of_kind(await _posts(client, handle), "escalation")
    assert [(p.local, p.text, p.duplicate) for p in posts] == [
        (True, "Activity timed out", None),
        (False, escalation.text, False),
    ], posts
    history = await handle.fetch_history()
    failed_tasks = [
        e for e in history.events if e.HasField("workflow_task_failed_event_attributes")
    ]
    assert failed_tasks == [], failed_tasks

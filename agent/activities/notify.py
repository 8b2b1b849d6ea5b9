"""post_to_thread and edit_thread_message: the chat platforms' outbound half, seen from the agent.

The agent package defines the interface; the Worker receives one implementation per platform by
injection (the composition root in refund_bot/ builds them). agent/ never imports bot/.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent import tracing
from agent.activities.heartbeat import heartbeating
from agent.activities.metrics import count
from agent.models import MessageEdit, OutboundMessage, PostedMessage


class ThreadPoster(Protocol):
    """Posts one message into a thread, at most once per message key; edits an earlier post.

    Implementations must make a retried call with the same `message.key` return the earlier post
    (`duplicate=True`) instead of posting again: Slack by message metadata, Discord by an enforced
    nonce, the local platform by a unique key in SQLite. A transient failure raises, and Temporal
    retries the Activity.
    """

    async def post(self, message: OutboundMessage) -> PostedMessage: ...

    async def edit(self, edit: MessageEdit) -> None:
        """Replace the post `edit.platform_message_id` (its buttons go). The same edit twice
        leaves the same message, so a retried Activity is harmless."""
        ...


class NotifyActivities:
    def __init__(self, posters: Mapping[str, ThreadPoster]) -> None:
        self._posters = dict(posters)

    def _poster(self, platform: str) -> ThreadPoster:
        poster = self._posters.get(platform)
        if poster is None:
            # A Worker without this platform configured cannot post there; fail loudly rather than
            # drop the customer's message. Retryable: a Worker that has it may pick the task up.
            raise ApplicationError(
                f"this Worker has no outbound poster for platform {platform!r}",
                type="PlatformNotConfigured",
            )
        return poster

    @activity.defn
    async def post_to_thread(self, message: OutboundMessage) -> PostedMessage:
        platform = message.thread.platform
        with (
            _counting_errors(platform),
            tracing.span(
                "chat.post",
                "client",
                platform=platform,
                workflow_id=message.key.workflow_id,
                seq=message.key.seq,
                message_kind=message.kind,
                round=message.round,
            ) as span,
        ):
            poster = self._poster(platform)
            async with heartbeating():
                # EXTERNAL EFFECT: one chat message, deduplicated by message.key on the platform.
                posted = await poster.post(message)
            span.set(duplicate=posted.duplicate)
        return posted.model_copy(update={"message": message})

    @activity.defn
    async def edit_thread_message(self, edit: MessageEdit) -> None:
        platform = edit.thread.platform
        with (
            _counting_errors(platform),
            tracing.span(
                "chat.edit",
                "client",
                platform=platform,
                workflow_id=edit.key.workflow_id,
                seq=edit.key.seq,
                decision=edit.decision,
            ),
        ):
            poster = self._poster(platform)
            async with heartbeating():
                # EXTERNAL EFFECT: an earlier post replaced; the same edit again changes nothing.
                await poster.edit(edit)


@contextlib.contextmanager
def _counting_errors(platform: str) -> Iterator[None]:
    try:
        yield
    except Exception:
        count("post_errors", platform=platform)
        raise

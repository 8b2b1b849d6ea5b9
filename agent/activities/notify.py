"""post_to_thread: the outbound half of the chat platforms, seen from the agent.

The agent package defines the interface; the Worker receives one implementation per platform by
injection (the composition root in refund_bot/ builds them). agent/ never imports bot/.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent.activities.heartbeat import heartbeating
from agent.models import OutboundMessage, PostedMessage


class ThreadPoster(Protocol):
    """Posts one message into a thread, at most once per message key.

    Implementations must make a retried call with the same `message.key` return the earlier post
    (`duplicate=True`) instead of posting again: Slack by message metadata, Discord by an enforced
    nonce, the local platform by a unique key in SQLite. A transient failure raises, and Temporal
    retries the Activity.
    """

    async def post(self, message: OutboundMessage) -> PostedMessage: ...


class NotifyActivities:
    def __init__(self, posters: Mapping[str, ThreadPoster]) -> None:
        self._posters = dict(posters)

    @activity.defn
    async def post_to_thread(self, message: OutboundMessage) -> PostedMessage:
        poster = self._posters.get(message.thread.platform)
        if poster is None:
            # A Worker without this platform configured cannot post there; fail loudly rather than
            # drop the customer's message. Retryable: a Worker that has it may pick the task up.
            raise ApplicationError(
                f"this Worker has no outbound poster for platform {message.thread.platform!r}",
                type="PlatformNotConfigured",
            )
        async with heartbeating():
            # EXTERNAL EFFECT: one chat message, deduplicated by message.key on the platform's side.
            return await poster.post(message)

"""The local channel, silent for its first post: the call never answers and nothing is posted
(a Slack that does not answer), so the post's local try times out and its Activity posts it.

    first post -> waits until cancelled (the local try's LOCAL_POST_TIMEOUT) -> nothing posted
    every later post, and every edit -> the local thread store
"""

from __future__ import annotations

import asyncio

from agent.models import MessageEdit, OutboundMessage, PostedMessage
from bot.local.thread_store import LocalThreadStore


class SilentFirstPost:
    def __init__(self, threads: LocalThreadStore) -> None:
        self.threads = threads
        self.calls = 0

    async def post(self, message: OutboundMessage) -> PostedMessage:
        self.calls += 1
        if self.calls == 1:
            await asyncio.Event().wait()  # until the local try's timeout cancels this call
        return await self.threads.post(message)

    async def edit(self, edit: MessageEdit) -> None:
        await self.threads.edit(edit)

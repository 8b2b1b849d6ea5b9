"""The local channel, silent for its first post of one kind: the call never answers and nothing is
posted (a Slack that does not answer), so the try inside the workflow task gives up and the
regular Activity posts it.

    first post of `kind` -> waits until cancelled (the try's LOCAL_POST_TIMEOUT) -> nothing posted
    every other post, and every edit -> the local thread store

A question is tried by the decide step that asks it (it gives up and returns without a post);
any other message by the Workflow's own local try (a local activity that times out).
"""

from __future__ import annotations

import asyncio

from agent.models import MessageEdit, MessageKind, OutboundMessage, PostedMessage
from bot.local.thread_store import LocalThreadStore


class SilentFirstPost:
    def __init__(self, threads: LocalThreadStore, kind: MessageKind = "question") -> None:
        self.threads = threads
        self.kind = kind
        self.silent_for: OutboundMessage | None = None

    async def post(self, message: OutboundMessage) -> PostedMessage:
        if message.kind == self.kind and self.silent_for is None:
            self.silent_for = message
            await asyncio.Event().wait()  # until the try's timeout cancels this call
        return await self.threads.post(message)

    async def edit(self, edit: MessageEdit) -> None:
        await self.threads.edit(edit)

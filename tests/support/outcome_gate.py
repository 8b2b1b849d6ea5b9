"""The local channel with the outcome's post held until a test lets it through.

    the outcome post -> OutcomeGate.post waits (reached is set) -> open.set() -> posted

So a test can place a customer's message exactly while a conversation is saying its last word.
"""

from __future__ import annotations

import asyncio

from agent.models import MessageEdit, OutboundMessage, PostedMessage
from bot.local.thread_store import LocalThreadStore


class OutcomeGate:
    def __init__(self, threads: LocalThreadStore) -> None:
        self._threads = threads
        self.reached = asyncio.Event()
        self.open = asyncio.Event()

    async def post(self, message: OutboundMessage) -> PostedMessage:
        if message.kind == "outcome":
            self.reached.set()
            await asyncio.wait_for(self.open.wait(), 30)
        return await self._threads.post(message)

    async def edit(self, edit: MessageEdit) -> None:
        await self._threads.edit(edit)

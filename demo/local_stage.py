"""The local support channel as /refund-demo's stage: threads in the SQLite thread store.

    story -> LocalStage.open_thread / post_line / post_frame -> thread store -> the terminal

The demo customer's lines are customer messages in the store, as if typed in the terminal; a frame
is the bot's note, in plain text (the terminal strips the mrkdwn marks when it prints).
"""

from __future__ import annotations

from agent.models import Actor, Platform, ThreadRef
from bot.commands import ChannelRef
from bot.local.thread_store import BOT_AUTHOR, LOCAL_WORKSPACE, LocalThreadStore
from demo.stage import Frame


class LocalStage:
    def __init__(self, threads: LocalThreadStore) -> None:
        self._threads = threads

    @property
    def platform(self) -> Platform:
        return "local"

    async def open_thread(
        self, channel: ChannelRef, title: str, author: Actor, text: str
    ) -> tuple[ThreadRef, str]:
        root = await self._threads.open_thread(channel.channel, author.user_id, text)
        await self._threads.add_note(root.thread_id, "frame", f"== {title} ==")
        thread = ThreadRef(
            platform="local",
            workspace=LOCAL_WORKSPACE,
            channel=channel.channel,
            thread=root.thread_id,
        )
        return thread, root.message_id

    async def post_line(self, thread: ThreadRef, author: Actor, text: str) -> str:
        return (await self._threads.add_reply(thread.thread, author.user_id, text)).message_id

    async def post_frame(self, where: ThreadRef | ChannelRef, frame: Frame) -> None:
        if isinstance(where, ThreadRef):
            await self._threads.add_note(where.thread, "frame", frame.text)
        else:
            await self._threads.open_thread(where.channel, BOT_AUTHOR, frame.text, kind="frame")

    async def questions(self, thread: ThreadRef) -> list[str]:
        return [
            m.text
            for m in await self._threads.messages(thread.thread)
            if m.author_is_bot and m.kind == "question"
        ]

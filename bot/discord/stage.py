"""Discord as /refund-demo's stage: threads, lines and frames by REST, with the bot's HTTPClient.

    story -> DiscordStage.open_thread (POST a root in the channel, POST .../threads on it)
          -> post_line (content) / post_frame (an embed)
    questions <- GET /channels/{thread}/messages, paged

The client is discord.py's HTTPClient the gateway client already logged in (its rate-limit
handling included; `RoutedHTTPClient` when DISCORD_API_URL is set), as bot/discord/outbound.py
posts with it: no second HTTP client. The thread is opened the way a customer's message opens one
(bot/discord/customer_messages.py): a public thread on the root message, whose id is the thread's,
and the ThreadRef every Discord conversation has (workspace: the guild, channel: the support
channel, thread: the thread), so the Workflow ID is derived the same way.

The bot posts everything, the demo customer's lines too (a named line: no person types them);
mentions never ping. How `questions` tells the agent's questions from the rest: Discord keeps no
metadata beside a message (Slack's stage reads the kind SlackThreadPoster writes there), and the
nonce each agent post carries is not returned when messages are read back. What Discord does keep
is who posted, whether a post has an embed, and its content. So a question is a message of the
default type, posted by this bot (a person typing a question's words is not the agent), with no
embed (the stage's root and frames always carry one), whose whole content is one of the texts the
agent asks with (`agent.policy.ASKED_TEXTS`: the intake questions are the policy's, with the live
model too). A demo line never matches: it starts with the customer's bold name. The text is what
tells a question from the agent's other plain posts (its hold notice, "start the return again",
the outcome), which look the same on Discord; matching the agent's own question texts is exact,
where a guess from the wording ("ends with a question mark") would not be. Should the agent ever
ask in words of its own, they belong in ASKED_TEXTS, or Discord's read-back will not see them.
"""

from __future__ import annotations

from typing import Any

from discord.http import HTTPClient, MultipartParameters

from agent.models import Actor, Platform, ThreadRef
from agent.policy import ASKED_TEXTS
from bot.demo_stage import ChannelRef, Frame
from bot.discord.customer_messages import THREAD_ARCHIVE_MINUTES
from bot.discord.render import fit_content, frame_embed, line_content
from bot.discord.replies import NO_PINGS

# GET /channels/{id}/messages returns at most 100 messages a page.
MESSAGES_PAGE_SIZE = 100
THREAD_NAME_LIMIT = 100
DEFAULT_MESSAGE_TYPE = 0


class DiscordStage:
    def __init__(self, http: HTTPClient, bot_user_id: int) -> None:
        """`http`: a logged-in HTTPClient (the gateway client's `http`); `bot_user_id`: whose
        posts the agent's are (the client's own user)."""
        self._http = http
        self._bot_user_id = str(bot_user_id)

    @property
    def platform(self) -> Platform:
        return "discord"

    async def open_thread(
        self, channel: ChannelRef, title: str, author: Actor, text: str
    ) -> tuple[ThreadRef, str]:
        root = await self._send(
            int(channel.channel),
            {"content": line_content(author.label, text), "embeds": [frame_embed(Frame(title))]},
        )
        # EXTERNAL EFFECT: a public thread on the root, as a customer's opening message gets one.
        thread = await self._http.start_thread_with_message(
            int(channel.channel),
            int(root["id"]),
            name=fit_content(title, THREAD_NAME_LIMIT),
            auto_archive_duration=THREAD_ARCHIVE_MINUTES,
        )
        ref = ThreadRef(
            platform="discord",
            workspace=channel.workspace,
            channel=channel.channel,
            thread=str(thread["id"]),
        )
        return ref, str(root["id"])

    async def post_line(self, thread: ThreadRef, author: Actor, text: str) -> str:
        posted = await self._send(int(thread.thread), {"content": line_content(author.label, text)})
        return str(posted["id"])

    async def post_frame(self, where: ThreadRef | ChannelRef, frame: Frame) -> None:
        # A thread's frames go in the thread; the summary at the channel's top level.
        target = where.thread if isinstance(where, ThreadRef) else where.channel
        await self._send(int(target), {"embeds": [frame_embed(frame)]})

    async def questions(self, thread: ThreadRef) -> list[str]:
        found: list[tuple[int, str]] = []
        after = 0  # the oldest page first, then each page after the newest message seen
        while True:
            page = await self._http.logs_from(int(thread.thread), MESSAGES_PAGE_SIZE, after=after)
            found += [(int(m["id"]), m["content"]) for m in page if self._is_question(m)]
            if len(page) < MESSAGES_PAGE_SIZE:
                return [content for _, content in sorted(found)]
            after = max(int(m["id"]) for m in page)

    def _is_question(self, message: dict[str, Any]) -> bool:
        return (
            message.get("type") == DEFAULT_MESSAGE_TYPE
            and str((message.get("author") or {}).get("id")) == self._bot_user_id
            and not message.get("embeds")
            and message.get("content") in ASKED_TEXTS
        )

    async def _send(self, channel_id: int, payload: dict[str, Any]) -> dict[str, Any]:
        """EXTERNAL EFFECT: one message, pinging nobody (it may quote a customer)."""
        body = {**payload, "allowed_mentions": NO_PINGS.to_dict()}
        return await self._http.send_message(
            channel_id, params=MultipartParameters(payload=body, multipart=None, files=None)
        )

"""Discord as /refund-demo's stage: threads, lines and frames by REST, with the bot's HTTPClient.

    story -> DiscordStage.open_thread (POST a root in the channel, POST .../threads on it)
          -> post_line (content) / post_frame (an embed)
    questions <- GET /channels/{thread}/messages, paged

The client is the HTTPClient the gateway client already logged in (its rate limits included), as
bot/discord/outbound.py posts with it. A thread is opened the way a customer's message opens one,
so its ThreadRef and Workflow ID are derived the same way. The bot posts every line, the demo
customer's too (a named line: no person types them); mentions never ping.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import discord
from discord.http import HTTPClient, MultipartParameters

from agent.models import Actor, Platform, ThreadRef
from agent.policy import ASKED_TEXTS
from bot.commands import ChannelRef
from bot.discord.openings import THREAD_ARCHIVE_MINUTES
from bot.discord.render import fit_content, utf16_len
from bot.discord.replies import NO_PINGS
from demo.stage import Frame

if TYPE_CHECKING:  # discord.types is for type checkers: imported first, it is a circular import
    from discord.types.embed import EmbedField
    from discord.types.message import Message

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
        """The agent's questions in the thread, oldest first.

        Discord keeps no metadata beside a message, and the nonce each agent post carries is not
        returned when messages are read back. So a question is a message of the default type,
        posted by this bot, with no embed (the stage's root and frames carry one), whose whole
        content is one of the texts the agent asks with (`agent.policy.ASKED_TEXTS`). A demo line
        never matches (it starts with the customer's bold name), and the text is what tells a
        question from the agent's other plain posts; a guess from the wording would not be exact.
        Should the agent ask in words of its own, they belong in ASKED_TEXTS."""
        found: list[tuple[int, str]] = []
        after = 0  # the oldest page first, then each page after the newest message seen
        while True:
            page = await self._http.logs_from(int(thread.thread), MESSAGES_PAGE_SIZE, after=after)
            found += [(int(m["id"]), m["content"]) for m in page if self._is_question(m)]
            if len(page) < MESSAGES_PAGE_SIZE:
                return [content for _, content in sorted(found)]
            after = max(int(m["id"]) for m in page)

    def _is_question(self, message: Message) -> bool:
        return (
            message.get("type") == DEFAULT_MESSAGE_TYPE
            and str((message.get("author") or {}).get("id")) == self._bot_user_id
            and not message.get("embeds")
            and message.get("content") in ASKED_TEXTS
        )

    async def _send(self, channel_id: int, payload: dict[str, Any]) -> Message:
        """EXTERNAL EFFECT: one message, pinging nobody (it may quote a customer)."""
        body = {**payload, "allowed_mentions": NO_PINGS.to_dict()}
        return await self._http.send_message(
            channel_id, params=MultipartParameters(payload=body, multipart=None, files=None)
        )


# A frame (demo/stage.py) is one embed:
# Discord's documented limits are a title of 256 characters, a description of 4096, at most 25
# fields of 256 (name) and 1024 (value), and 6000 characters in all; each part is cut to fit.
EMBED_TITLE_LIMIT = 256
EMBED_DESCRIPTION_LIMIT = 4096
EMBED_FIELD_NAME_LIMIT = 256
EMBED_FIELD_VALUE_LIMIT = 1024
EMBED_MAX_FIELDS = 25
EMBED_TOTAL_LIMIT = 6000
# One colour per tone, Discord's own palette: red, blurple, green; a neutral frame has none.
TONE_COLOURS = {"gone": 0xED4245, "survives": 0x5865F2, "good": 0x57F287}
_TONE_EMOJI = {"gone": "💥 ", "survives": "📜 ", "good": "✅ "}
# Slack mrkdwn's bold (`*bold*`) is Discord's italic; `_italic_` and `code` read the same in both.
_SLACK_BOLD = re.compile(r"(?<![*\w])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![*\w])")


def discord_markdown(mrkdwn: str) -> str:
    """A frame's line, written in Slack's mrkdwn (demo.stage.Frame), as Discord markdown."""
    return _SLACK_BOLD.sub(r"**\1**", mrkdwn)


def frame_embed(frame: Frame) -> dict[str, Any]:
    """A frame as one embed: the title, the lines as its description, each column an inline
    field (Discord sets inline fields side by side), and the tone's colour."""
    title = fit_content(_TONE_EMOJI.get(frame.tone, "") + frame.title, EMBED_TITLE_LIMIT)
    embed: dict[str, Any] = {"type": "rich", "title": title}
    fields: list[EmbedField] = [
        {
            "name": fit_content(column.heading, EMBED_FIELD_NAME_LIMIT),
            "value": fit_content(
                "\n".join(discord_markdown(line) for line in column.lines) or "-",
                EMBED_FIELD_VALUE_LIMIT,
            ),
            "inline": True,
        }
        for column in frame.columns[:EMBED_MAX_FIELDS]
    ]
    if frame.lines:
        # The description gets what the title and the fields leave of the embed's 6000.
        used = utf16_len(title) + sum(utf16_len(f["name"] + f["value"]) for f in fields)
        budget = min(EMBED_DESCRIPTION_LIMIT, EMBED_TOTAL_LIMIT - used)
        description = "\n".join(discord_markdown(line) for line in frame.lines)
        embed["description"] = fit_content(description, budget)
    if fields:
        embed["fields"] = fields
    if frame.tone in TONE_COLOURS:
        embed["color"] = TONE_COLOURS[frame.tone]
    return embed


def line_content(author: str, text: str) -> str:
    """A person's line the bot posts for them (/refund-demo's demo customer): bold name, text."""
    return fit_content(f"**{discord.utils.escape_markdown(author)}:** {text}")

"""Slack as /refund-demo's stage: threads, lines and frames by the Web API.

    story -> SlackStage.open_thread (chat.postMessage in the channel) -> post_line / post_frame
          (chat.postMessage in the thread, Block Kit) ; questions <- conversations.replies

The bot posts everything, the demo customer's lines too (a named line: no person types them);
`questions` reads back the agent's questions by the kind in each post's metadata, which
SlackThreadPoster writes on every agent post.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from agent.models import Actor, Platform, ThreadRef
from bot.commands import ChannelRef
from bot.slack.outbound import REPLIES_PAGE_SIZE, BoundedRateLimitRetryHandler
from bot.slack.render import SECTION_TEXT_LIMIT, escape, metadata_payload
from demo.stage import Frame

# The story posts a few dozen messages in a minute, over chat.postMessage's one-per-second
# channel limit: a 429 is waited out (Retry-After) rather than ending the story.
RATE_LIMIT_RETRIES = 10
RATE_LIMIT_MAX_WAIT = 30


class SlackStage:
    def __init__(self, client: AsyncWebClient) -> None:
        # A client of its own, with the request's credentials: bolt's client is shared, and its
        # retry handlers are not ours to change. Its connections are the app's (kept alive).
        self._client = AsyncWebClient(
            token=client.token,
            base_url=client.base_url,
            timeout=client.timeout,
            session=client.session,
            retry_handlers=[
                *client.retry_handlers,
                BoundedRateLimitRetryHandler(
                    max_retry_count=RATE_LIMIT_RETRIES, max_wait_seconds=RATE_LIMIT_MAX_WAIT
                ),
            ],
        )

    @property
    def platform(self) -> Platform:
        return "slack"

    async def open_thread(
        self, channel: ChannelRef, title: str, author: Actor, text: str
    ) -> tuple[ThreadRef, str]:
        blocks = [*frame_blocks(Frame(title)), *line_blocks(author.label, text)]
        response = await self._client.chat_postMessage(
            channel=channel.channel,
            text=escape(f"{title}: {author.label}: {text}"),
            blocks=blocks,
            unfurl_links=False,
            unfurl_media=False,
        )
        ts = str(response["ts"])
        thread = ThreadRef(
            platform="slack", workspace=channel.workspace, channel=channel.channel, thread=ts
        )
        return thread, ts

    async def post_line(self, thread: ThreadRef, author: Actor, text: str) -> str:
        response = await self._client.chat_postMessage(
            channel=thread.channel,
            thread_ts=thread.thread,
            text=escape(f"{author.label}: {text}"),
            blocks=line_blocks(author.label, text),
        )
        return str(response["ts"])

    async def post_frame(self, where: ThreadRef | ChannelRef, frame: Frame) -> None:
        thread_ts = where.thread if isinstance(where, ThreadRef) else None
        await self._client.chat_postMessage(
            channel=where.channel,
            thread_ts=thread_ts,
            text=escape(frame.text),
            blocks=frame_blocks(frame),
        )

    async def questions(self, thread: ThreadRef) -> list[str]:
        found: list[str] = []
        cursor: str | None = None
        while True:
            response = await self._client.conversations_replies(
                channel=thread.channel,
                ts=thread.thread,
                include_all_metadata=True,
                limit=REPLIES_PAGE_SIZE,
                cursor=cursor,
            )
            found += [
                str(m.get("text", ""))
                for m in response.get("messages") or []
                if metadata_payload(m).get("kind") == "question"
            ]
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if cursor is None:
                return found


# A frame (demo/stage.py) in Block Kit: a header, then the lines, then the two sides as a
# section's fields, which Slack lays out in two columns. A header is plain text, at most 150
# characters; a section's fields are at most 10, each at most 2000 characters.
HEADER_TEXT_LIMIT = 150
FIELD_TEXT_LIMIT = 2000
_TONE_EMOJI = {"gone": ":boom: ", "survives": ":scroll: ", "good": ":white_check_mark: "}


def frame_blocks(frame: Frame) -> list[dict[str, Any]]:
    """A frame as Block Kit: a header, a section of its lines, a section of its columns."""
    title = (_TONE_EMOJI.get(frame.tone, "") + frame.title)[:HEADER_TEXT_LIMIT]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title, "emoji": True}}
    ]
    if frame.lines:
        # Escaped line by line: a line may quote a customer's answer; our marks survive it.
        blocks += _text_blocks_marked("\n".join(escape(line) for line in frame.lines))
    if frame.columns:
        fields = [
            {
                "type": "mrkdwn",
                "text": "\n".join(
                    [f"*{escape(column.heading)}*", *(escape(line) for line in column.lines)]
                )[:FIELD_TEXT_LIMIT],
            }
            for column in frame.columns[:10]
        ]
        blocks.append({"type": "section", "fields": fields})
    return blocks


def _text_blocks_marked(text: str) -> list[dict[str, Any]]:
    """Section blocks of already-escaped mrkdwn whose marks should render."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[i : i + SECTION_TEXT_LIMIT]}}
        for i in range(0, len(text), SECTION_TEXT_LIMIT)
    ]


def line_blocks(author: str, text: str) -> list[dict[str, Any]]:
    """A person's line the bot posts for them (/refund-demo's demo customer): name, then text."""
    return [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": f"*{escape(author)}:* {escape(text)}"},
        }
    ]

"""Slack as /refund-demo's stage: threads, lines and frames by the Web API.

    story -> SlackStage.open_thread (chat.postMessage in the channel) -> post_line / post_frame
          (chat.postMessage in the thread, Block Kit) ; questions <- conversations.replies

The bot posts everything, the demo customer's lines too (a named line: no person types them);
`questions` reads back the agent's questions by the kind in each post's metadata, which
SlackThreadPoster writes on every agent post.
"""

from __future__ import annotations

from slack_sdk.web.async_client import AsyncWebClient

from agent.models import Actor, Platform, ThreadRef
from bot.demo_stage import ChannelRef, Frame
from bot.slack.outbound import REPLIES_PAGE_SIZE, BoundedRateLimitRetryHandler
from bot.slack.render import escape, frame_blocks, line_blocks, metadata_payload

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

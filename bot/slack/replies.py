"""The app's own short answers in Slack: a notice in a thread, or a reply only one person sees.

These are the inbound side's courtesy messages (the agent's posts go through the Worker's
`post_to_thread` Activity, bot.slack.outbound). A failure here is logged and never stops the
listener: the event or click has already been handled.
"""

from __future__ import annotations

import logging

from slack_bolt.context.respond.async_respond import AsyncRespond
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)


async def post_notice(client: AsyncWebClient, channel: str, thread_ts: str, text: str) -> None:
    """A message in the thread that everyone sees; a failure is only logged."""
    try:
        await client.chat_postMessage(
            channel=channel, thread_ts=thread_ts, text=text, unfurl_links=False
        )
    except SlackApiError as err:
        log.warning("could not post a notice in %s: %s", channel, err.response.get("error"))


async def post_ephemeral(
    client: AsyncWebClient,
    respond: AsyncRespond | None,
    channel: str,
    user_id: str,
    thread_ts: str | None,
    text: str,
) -> None:
    """Only `user_id` sees it, in the thread; by response_url if the bot is not in the channel."""
    try:
        await client.chat_postEphemeral(
            channel=channel, user=user_id, thread_ts=thread_ts, text=text
        )
        return
    except SlackApiError as err:
        log.info("chat.postEphemeral in %s failed (%s)", channel, err.response.get("error"))
    if respond is not None and respond.response_url:
        await respond(text=text, response_type="ephemeral", replace_original=False)

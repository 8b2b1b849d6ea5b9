"""Who the bot is in the workspace, as Slack's auth.test names it: its own messages never reach
the agent.

    serve -> auth.test (the token's check) -> BotIdentity(user_id, bot_id) -> the message filter

A message event whose `user` is the bot's user, or whose `bot_id` is the bot's, is the bot's own
post coming back: it is acknowledged and dropped, never kept (bolt's own self-event filter runs
only after the edge has kept a message). Learned once: at start by `serve`, or at the first
message event when the app is served some other way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.requests import MessageEvent


@dataclass(frozen=True, slots=True)
class BotIdentity:
    user_id: str  # the bot user (U…)
    bot_id: str | None  # the bot (B…)

    def wrote(self, event: MessageEvent) -> bool:
        """Whether the bot itself wrote this message (by its user or its bot id)."""
        if event.user is not None and event.user == self.user_id:
            return True
        return self.bot_id is not None and event.bot_id == self.bot_id


class OwnIdentity:
    """The bot's identity, read from auth.test once and kept."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client
        self._known: BotIdentity | None = None
        self._lock = asyncio.Lock()

    async def learn(self) -> BotIdentity:
        """auth.test now (its SlackApiError propagates), and keep what it says."""
        response = await self._client.auth_test()
        self._known = identity_from(response.data if isinstance(response.data, dict) else {})
        return self._known

    async def get(self) -> BotIdentity:
        """The identity, from auth.test the first time."""
        if self._known is not None:
            return self._known
        async with self._lock:
            return self._known or await self.learn()


def identity_from(auth: Mapping[str, Any]) -> BotIdentity:
    """auth.test's answer for a bot token: `user_id` (the bot user) and `bot_id`."""
    user_id, bot_id = auth.get("user_id"), auth.get("bot_id")
    if not isinstance(user_id, str) or not user_id:
        raise ValueError("auth.test named no bot user (user_id)")
    return BotIdentity(user_id, bot_id if isinstance(bot_id, str) and bot_id else None)

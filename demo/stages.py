"""bot.commands.DemoStages: each platform's /refund-demo stage, from what its adapter holds.

    adapter -> Commands.refund_demo(stage=lambda stages: stages.slack(client)) -> SlackStage(client)

A platform's stage (and its SDK) is imported only when that platform asks for one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from discord.http import HTTPClient
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.local.thread_store import LocalThreadStore
    from demo.stage import Stage


class PlatformStages:
    def slack(self, client: AsyncWebClient) -> Stage:
        from demo.slack_stage import SlackStage

        return SlackStage(client)

    def discord(self, http: HTTPClient, bot_user_id: int) -> Stage:
        from demo.discord_stage import DiscordStage

        return DiscordStage(http, bot_user_id)

    def local(self, threads: LocalThreadStore) -> Stage:
        from demo.local_stage import LocalStage

        return LocalStage(threads)

"""Slack settings: environment variables prefixed SLACK_, or a `.env` file."""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

SLACK_API_URL = "https://slack.com/api/"


class SlackSettings(BaseSettings):
    # env_ignore_empty: `SLACK_BOT_TOKEN=` copied from .env.example means "Slack off".
    model_config = SettingsConfigDict(
        env_prefix="SLACK_", env_file=".env", extra="ignore", env_ignore_empty=True
    )

    bot_token: SecretStr | None = None  # xoxb-…; never logged, never an Activity argument
    app_token: SecretStr | None = None  # xapp-…; set means Socket Mode instead of HTTP
    signing_secret: SecretStr | None = None  # verifies HTTP-mode requests
    support_channel: str | None = None  # a channel id (C…/G…), not a name: names can change
    port: int = 3000
    # Web API base URL, so the bot can be pointed at a proxy or at harness.fakes.slack_api.
    api_url: str = SLACK_API_URL
    approver_group: str | None = None  # a user-group id (S…), read later as a live grant source
    # The refund limit a member of `approver_group` approves up to; None means no limit.
    approver_group_limit_cents: int | None = None

    @field_validator("api_url", mode="before")
    @classmethod
    def _trailing_slash(cls, value: Any) -> Any:
        # The SDK joins method names with urljoin, which drops the last path segment unless the
        # base ends in "/".
        if isinstance(value, str):
            value = value.strip()
            return value if value.endswith("/") else value + "/"
        return value

    @property
    def enabled(self) -> bool:
        return self.bot_token is not None

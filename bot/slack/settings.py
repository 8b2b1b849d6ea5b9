"""Slack settings: environment variables prefixed SLACK_, or a `.env` file."""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

SLACK_API_URL = "https://slack.com/api/"


class SlackSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SLACK_", env_file=".env", extra="ignore")

    bot_token: SecretStr | None = None  # xoxb-…; never logged, never an Activity argument
    app_token: SecretStr | None = None  # xapp-…; set means Socket Mode instead of HTTP
    signing_secret: SecretStr | None = None  # verifies HTTP-mode requests
    support_channel: str | None = None  # a channel id (C…/G…), not a name: names can change
    port: int = 3000
    # Web API base URL, so the bot can be pointed at a proxy or at tests.fakes.slack_api.
    api_url: str = SLACK_API_URL
    approver_group: str | None = None  # a user-group id (S…), read later as a live grant source
    # The refund limit a member of `approver_group` approves up to; None means no limit.
    approver_group_limit_cents: int | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        # `SLACK_BOT_TOKEN=` copied from .env.example must mean "Slack off", not "log in with ''".
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("api_url", mode="before")
    @classmethod
    def _default_and_trailing_slash(cls, value: Any) -> Any:
        # A blank SLACK_API_URL means Slack's own. The SDK joins method names with urljoin, which
        # drops the last path segment unless the base ends in "/".
        if value is None or (isinstance(value, str) and not value.strip()):
            return SLACK_API_URL
        if isinstance(value, str):
            value = value.strip()
            return value if value.endswith("/") else value + "/"
        return value

    @property
    def enabled(self) -> bool:
        return self.bot_token is not None

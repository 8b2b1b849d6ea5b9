"""Discord settings: environment variables prefixed DISCORD_, or a `.env` file."""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class DiscordSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DISCORD_", env_file=".env", extra="ignore")

    token: SecretStr | None = None  # the bot token; never logged, never an Activity argument
    support_channel_id: int | None = None
    guild_id: int | None = None  # application commands sync to this guild when set (instant)
    approver_role: str | None = None  # a role name or id, read later as a live grant source
    # REST base URL including the API version, e.g. "http://127.0.0.1:8080/api/v10" for a proxy
    # or a local fake. None means Discord's own (discord.http.Route.BASE).
    api_url: str | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        # `DISCORD_TOKEN=` copied from .env.example must mean "Discord off", not "log in with ''",
        # and `DISCORD_GUILD_ID=` must not fail int parsing.
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("api_url")
    @classmethod
    def _no_trailing_slash(cls, value: str | None) -> str | None:
        # discord.py builds URLs as BASE + "/channels/..."; a trailing slash would double it.
        return value.strip().rstrip("/") if value else value

    @property
    def enabled(self) -> bool:
        return self.token is not None

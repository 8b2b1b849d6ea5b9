"""Discord settings: environment variables prefixed DISCORD_, or a `.env` file."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# What a holder of the approver role may approve, in cents, unless DISCORD_APPROVER_ROLE_LIMIT_CENTS
# says otherwise: the same $1,000.00 the grants store seeds for the local support agent.
DEFAULT_APPROVER_ROLE_LIMIT_CENTS = 100_000


class DiscordSettings(BaseSettings):
    # env_ignore_empty: `DISCORD_TOKEN=` copied from .env.example means "Discord off", and a blank
    # number means its default.
    model_config = SettingsConfigDict(
        env_prefix="DISCORD_", env_file=".env", extra="ignore", env_ignore_empty=True
    )

    token: SecretStr | None = None  # the bot token; never logged, never an Activity argument
    support_channel_id: int | None = None
    guild_id: int | None = None  # application commands sync to this guild when set (instant)
    approver_role: str | None = None  # a role name or id, read later as a live grant source
    # The refund limit of a grant that comes from holding `approver_role`. Always a number.
    approver_role_limit_cents: int = DEFAULT_APPROVER_ROLE_LIMIT_CENTS
    # REST base URL including the API version, e.g. "http://127.0.0.1:8080/api/v10" for a proxy
    # or a local fake. None means Discord's own (discord.http.Route.BASE).
    api_url: str | None = None
    # The gateway (websocket) URL for every connection and resume, e.g. "ws://127.0.0.1:8080/"
    # for a proxy or a local fake. None means Discord's: discord.py's DEFAULT_GATEWAY for a new
    # session, and the resume_gateway_url Discord gives in READY for a resumed one.
    gateway_url: str | None = None
    # One gateway connection per token: the bot process holding the lease connects, another
    # stands by. A holder that dies without releasing it (SIGKILL) is taken over after this long.
    gateway_lease_seconds: int = 30
    # Opening a customer's thread (bot/discord/openings.py): one attempt may take this long
    # (discord.py's own retries of a 500 included), the next waits a backoff doubling from a
    # second up to the cap, and past the notice the customer is told, once, that it is late.
    thread_attempt_seconds: float = 60.0
    thread_retry_cap_seconds: float = 60.0
    thread_delay_notice_seconds: float = 30.0

    @field_validator("approver_role_limit_cents")
    @classmethod
    def _limit_not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("DISCORD_APPROVER_ROLE_LIMIT_CENTS must be 0 or more")
        return value

    @field_validator("gateway_lease_seconds")
    @classmethod
    def _lease_long_enough(cls, value: int) -> int:
        if value < 3:
            raise ValueError(
                "DISCORD_GATEWAY_LEASE_SECONDS must be 3 or more (it is renewed every third)"
            )
        return value

    @field_validator(
        "thread_attempt_seconds", "thread_retry_cap_seconds", "thread_delay_notice_seconds"
    )
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be more than 0 seconds")
        return value

    @field_validator("api_url")
    @classmethod
    def _no_trailing_slash(cls, value: str | None) -> str | None:
        # discord.py builds URLs as BASE + "/channels/..."; a trailing slash would double it.
        return value.strip().rstrip("/") if value else value

    @field_validator("gateway_url")
    @classmethod
    def _a_websocket_url(cls, value: str | None) -> str | None:
        if not value:
            return value
        value = value.strip()
        if urlsplit(value).scheme not in ("ws", "wss") or not urlsplit(value).netloc:
            raise ValueError(f"DISCORD_GATEWAY_URL must be a ws:// or wss:// URL, not {value!r}")
        return value

    @property
    def enabled(self) -> bool:
        return self.token is not None

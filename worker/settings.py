"""Settings of a refund-bot process itself: the name of its host, and where it serves its metrics.

REFUND_BOT_HOST -> Worker identities, the supervisor's control queue, /crash-worker <host>
REFUND_BOT_WORKERS -> how many Worker processes the supervisor keeps polling
METRICS_ADDRESS -> `refund-bot bot` / `run`: /healthz and /metrics
WORKER_METRICS_ADDRESS -> `refund-bot worker`: /metrics (the SDK's exporter), its port plus the
    slot its supervisor gave it (`--metrics-slot`)
SECRETS -> child_environment: what a child process is given of this one's secrets (what it needs)
"""

from __future__ import annotations

import os
import socket
from collections.abc import Collection, Mapping
from datetime import timedelta

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent.settings import span

OFF = "off"

# Every setting that holds a secret (the SecretStr settings of refund_bot.config, and DATABASE_URL's
# password). A child process is given only those it uses: a child's environment is readable by
# anyone who may read its /proc/<pid>/environ, and is inherited by whatever it starts in turn.
SECRETS = frozenset(
    {
        "SLACK_BOT_TOKEN",
        "SLACK_APP_TOKEN",
        "SLACK_SIGNING_SECRET",
        "DISCORD_TOKEN",
        "STRIPE_API_KEY",
        "OPENAI_API_KEY",
        "TEMPORAL_API_KEY",
        "CODEC_KEYS",
        "CODEC_SERVER_TOKEN",
        "DATABASE_URL",
    }
)
# What a Worker uses: the platforms' outbound halves post with the bot tokens, the refund and the
# model take their keys, Temporal its API key, the payloads the codec's keys, the stores the
# database. Never the inbound halves' secrets (Slack's app token and signing secret) nor the codec
# server's token.
WORKER_SECRETS = frozenset(
    {
        "SLACK_BOT_TOKEN",
        "DISCORD_TOKEN",
        "STRIPE_API_KEY",
        "OPENAI_API_KEY",
        "TEMPORAL_API_KEY",
        "CODEC_KEYS",
        "DATABASE_URL",
    }
)


def child_environment(
    needs: Collection[str] = (), environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """This process's environment (or `environ`) for a child, without the secrets it does not
    `need`: everything else (PATH, the locale, SSL_CERT_FILE, the other settings) as it is."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k not in SECRETS or k in needs}


def parse_address(value: str) -> tuple[str, int]:
    """`127.0.0.1:9464` -> ("127.0.0.1", 9464); `[::1]:9464` too. ValueError otherwise."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not host:port")
    return host, int(port)


def slot_address(address: str, slot: int) -> str:
    """`address` with its port moved up by `slot`: a supervisor's Workers on one host each serve
    metrics on their own port (9465, 9466, ...). "off" stays off."""
    if address == OFF or slot == 0:
        return address
    host, port = parse_address(address)
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port + slot}"


# The SDK's default (max_cached_workflows): about 0.25 MB of Worker memory per cached conversation;
# a Worker with 10,000 open, 1,000 cached, measured 366 MB (docs/benchmarks.md, "Open
# conversations").
DEFAULT_CACHED_CONVERSATIONS = 1000
# Short, so a reply queued on a dead Worker's sticky queue before its reset goes on within the
# 1.5 s recovery bound (the SDK's default is 10 s).
DEFAULT_STICKY_TIMEOUT = timedelta(seconds=1)
# A bound that keeps a typo (an extra zero or three) from a Worker that grows out of its memory.
MAX_CACHED_CONVERSATIONS = 100_000


class ProcessSettings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", env_ignore_empty=True)

    # The name this host goes by in Worker identities (refund-bot-worker-<pid>@<host>), in
    # /crash-worker <host> and in the Discord gateway lease. Default: the machine's hostname; set it
    # where hostnames say nothing (containers) or are shared.
    host: str = Field(default_factory=socket.gethostname, alias="REFUND_BOT_HOST")
    # Worker processes the supervisor keeps polling, beside its warm standby. With two, a Worker
    # that dies takes only its own conversations' caches: the other Worker's carry on without a
    # replay (docs/benchmarks.md, "Recovery after a SIGKILL"). Each is one interpreter (one core).
    workers: int = Field(default=1, ge=1, le=16, alias="REFUND_BOT_WORKERS")
    # Conversations each Worker keeps in memory (the SDK's max_cached_workflows). A cached one
    # answers a reply from where it stands; an evicted one is replayed from its history first
    # (tens of milliseconds of CPU, and one history read). Each cached one costs the Worker about
    # 0.25 MB of memory (docs/benchmarks.md, "Open conversations") and lengthens its full garbage
    # collections, which stop it: about 2 s with 5,000 cached on the 2-core benchmark machine, and
    # past 2 s the SDK fails the tasks in flight.
    cached_conversations: int = Field(
        default=DEFAULT_CACHED_CONVERSATIONS,
        ge=1,
        le=MAX_CACHED_CONVERSATIONS,
        alias="WORKER_CACHED_CONVERSATIONS",
    )
    # How long a conversation's next workflow task waits on the Worker's sticky queue (where its
    # cached state is) before Temporal gives it to any Worker, which replays it first (the SDK's
    # sticky_queue_schedule_to_start_timeout). It bounds a reply's wait after a Worker death: one
    # queued before the death's reset, or one nobody resets (a lost host). Under a crowd that
    # keeps the server busier than this, each task that runs out is moved and replayed
    # (docs/benchmarks.md, "Ten thousand replies at once").
    sticky_timeout: timedelta = Field(
        default=DEFAULT_STICKY_TIMEOUT,
        ge=timedelta(seconds=1),
        le=timedelta(hours=1),
        alias="WORKER_STICKY_TIMEOUT",
    )
    # Where `refund-bot bot` and `refund-bot run` serve /healthz and /metrics; "off": nowhere.
    metrics_address: str = Field(default="127.0.0.1:9464", alias="METRICS_ADDRESS")
    # Where each `refund-bot worker` serves /metrics; "off": nowhere. A supervisor's children
    # (REFUND_BOT_WORKERS and the standby) take this port and the next ones, one slot each.
    worker_metrics_address: str = Field(default="127.0.0.1:9465", alias="WORKER_METRICS_ADDRESS")

    @field_validator("sticky_timeout", mode="before")
    @classmethod
    def _span(cls, value: object) -> object:
        return span(value)

    @field_validator("host")
    @classmethod
    def _one_word(cls, value: str) -> str:
        value = value.strip()
        if not value or any(c.isspace() or c in "@/" for c in value):
            raise ValueError(
                f"REFUND_BOT_HOST={value!r} is not a host name: use letters, digits, dots and "
                "dashes (no spaces, @ or /), or remove it for the machine's hostname"
            )
        return value

    @field_validator("metrics_address", "worker_metrics_address")
    @classmethod
    def _address_or_off(cls, value: str, info: ValidationInfo) -> str:
        value = value.strip()
        if value.lower() == OFF:
            return OFF
        try:
            parse_address(value)
        except ValueError:
            name = (cls.model_fields[str(info.field_name)].alias or "").upper()
            raise ValueError(
                f"{name}={value!r} is not host:port: set e.g. 127.0.0.1:9464, or off"
            ) from None
        return value

"""Every setting, read and checked once before a command starts anything: a mistake is one line.

    environment / .env -> the settings classes (types) -> the checks a command needs -> Config

Each settings class lives beside the code that reads it (agent/, bot/slack/, bot/discord/) and
refuses a value of the wrong type; this module turns that refusal into one line naming the variable
and what to do, and checks what a combination of settings must satisfy (Slack HTTP mode needs a
signing secret, a live model needs its key, the data directory must be writable). The CLI calls
`load` and the command's checks first; `ConfigError` is printed as is, never as a traceback.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr, ValidationError
from pydantic_settings import BaseSettings

from agent.settings import AgentSettings, CodecServerSettings, TemporalSettings
from bot.discord.settings import DiscordSettings
from bot.slack.settings import SlackSettings
from worker.settings import ProcessSettings

# A Slack channel id: public (C…) or private (G…). A name ("#support") can change; an id cannot.
_SLACK_CHANNEL_ID = re.compile(r"^[CG][A-Z0-9]{2,}$")


class ConfigError(Exception):
    """A setting is wrong. The message is one line: the variable, what is wrong, what to do."""


@dataclass(frozen=True)
class Config:
    temporal: TemporalSettings
    agent: AgentSettings
    codec_server: CodecServerSettings
    slack: SlackSettings
    discord: DiscordSettings
    process: ProcessSettings


# The crash drill's switch: demo/ reads its own settings (refund_bot.demos asks it only when this
# is true), so this name is all of them the product knows.
DRILL = "REFUND_DRILL_PAUSE_AFTER_EFFECT"

# Every settings class, by its Config field: what `load` reads, and all a process can be given.
SETTINGS: tuple[tuple[str, type[BaseSettings]], ...] = (
    ("temporal", TemporalSettings),
    ("agent", AgentSettings),
    ("codec_server", CodecServerSettings),
    ("slack", SlackSettings),
    ("discord", DiscordSettings),
    ("process", ProcessSettings),
)


def setting_names() -> set[str]:
    """The environment variable of every refund-bot setting."""
    return {env_name(cls, name) for _, cls in SETTINGS for name in cls.model_fields} | {DRILL}


def env_name(cls: type[BaseSettings], field: str) -> str:
    """The environment variable a settings field is read from (its alias, or prefix + name)."""
    info = cls.model_fields.get(field)
    if info is not None and info.alias:
        return info.alias.upper()
    return f"{cls.model_config.get('env_prefix', '')}{field}".upper()


def is_secret(cls: type[BaseSettings], field: str) -> bool:
    info = cls.model_fields.get(field)
    return info is not None and "SecretStr" in str(info.annotation)


def _describe(cls: type[BaseSettings], error: Any) -> str:
    """One pydantic error as `NAME='value' is not …: do this` (a secret's value never shown)."""
    field = str(error["loc"][0]) if error["loc"] else ""
    by_alias = {(f.alias or "").lower(): n for n, f in cls.model_fields.items() if f.alias}
    field = by_alias.get(field.lower(), field)
    name = env_name(cls, field)
    shown = name if is_secret(cls, field) else f"{name}={error.get('input')!r}"
    info = cls.model_fields.get(field)
    default = info.default if info is not None else None
    kind = error["type"]
    if kind in ("int_parsing", "int_type", "int_from_float"):
        if default is None:
            return f"{shown} is not a whole number: set it to one, or remove it"
        return f"{shown} is not a whole number: set it to one, or remove it (default {default})"
    if kind in ("bool_parsing", "bool_type"):
        return f"{shown} is not true or false: set it to true or false, or remove it"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return f"{shown} is not a known value: set it to one of {expected}"
    if kind == "value_error":
        # The validator's own sentence already names the variable and what to do.
        return str(error["msg"]).removeprefix("Value error, ")
    return f"{shown}: {error['msg']}"


def load() -> Config:
    """Read every setting; a value of the wrong type anywhere is one ConfigError line."""
    read: dict[str, Any] = {}
    problems: list[str] = []
    for key, cls in SETTINGS:
        try:
            read[key] = cls()
        except ValidationError as err:
            problems.extend(_describe(cls, e) for e in err.errors())
    if problems:
        raise ConfigError("; ".join(problems))
    return Config(**read)


# ---------------------------------------------------------------------------------------------
# What a combination of settings must satisfy. Each check returns the problems it found.
# ---------------------------------------------------------------------------------------------

Check = Callable[[Config], Iterable[str]]


def slack_complete(config: Config) -> Iterable[str]:
    slack = config.slack
    if not slack.enabled:
        return
    if slack.app_token is None and slack.signing_secret is None:
        yield (
            "SLACK_BOT_TOKEN is set but neither SLACK_APP_TOKEN (Socket Mode) nor "
            "SLACK_SIGNING_SECRET (HTTP mode) is: set one of them (docs/slack.md), or unset "
            "SLACK_BOT_TOKEN to leave Slack off"
        )
    if not slack.support_channel:
        yield (
            "SLACK_SUPPORT_CHANNEL is not set: set it to the support channel's id (C…, at the "
            "bottom of the channel's details), or unset SLACK_BOT_TOKEN to leave Slack off"
        )
    elif not _SLACK_CHANNEL_ID.match(slack.support_channel):
        yield (
            f"SLACK_SUPPORT_CHANNEL={slack.support_channel!r} is not a channel id: set the "
            "channel's id (C… or G…, at the bottom of the channel's details), not its name"
        )


def discord_complete(config: Config) -> Iterable[str]:
    if config.discord.enabled and config.discord.support_channel_id is None:
        yield (
            "DISCORD_TOKEN is set but DISCORD_SUPPORT_CHANNEL_ID is not: set it to the support "
            "channel's id (Developer Mode on, right-click the channel > Copy Channel ID), or "
            "unset DISCORD_TOKEN to leave Discord off"
        )


def a_chat_platform(config: Config) -> Iterable[str]:
    if not config.slack.enabled and not config.discord.enabled:
        yield (
            "neither SLACK_BOT_TOKEN nor DISCORD_TOKEN is set: `refund-bot bot` serves Slack and "
            "Discord, so configure one (docs/slack.md, docs/discord.md); `refund-bot run` opens "
            "the terminal channel instead"
        )


def discord_token(config: Config) -> Iterable[str]:
    if not config.discord.enabled:
        yield (
            "DISCORD_TOKEN is not set: `refund-bot discord sync-commands` registers the commands "
            "as the bot, so set the bot's token (Developer Portal > Bot > Reset Token) in .env"
        )


def decider_ready(config: Config) -> Iterable[str]:
    agent = config.agent
    if agent.agent_decider == "openai" and not _has(agent.openai_api_key):
        yield (
            "OPENAI_API_KEY is not set but AGENT_DECIDER=openai needs it: set the key, or set "
            "AGENT_DECIDER=policy for the offline policy"
        )


def temporal_tls_files(config: Config) -> Iterable[str]:
    temporal = config.temporal
    paths = {
        "TEMPORAL_TLS_CERT_PATH": temporal.tls_cert_path,
        "TEMPORAL_TLS_KEY_PATH": temporal.tls_key_path,
    }
    given = {name: path for name, path in paths.items() if path is not None}
    if len(given) == 1:
        (missing,) = set(paths) - set(given)
        yield f"{next(iter(given))} is set but {missing} is not: mTLS needs both, or neither"
    for name, path in given.items():
        if not path.is_file():
            yield f"{name}={str(path)!r} is not a readable file: point it at the PEM file"


def data_dir_writable(config: Config) -> Iterable[str]:
    data_dir = config.agent.data_dir
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        # Creating a file is the only reliable test (permissions, read-only mounts, ACLs).
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".write-test-"):
            pass
    except OSError as err:
        why = err.strerror or type(err).__name__
        yield (
            f"DATA_DIR={str(data_dir)!r} is not a writable directory ({why}): point DATA_DIR at "
            "a directory refund-bot may create files in"
        )


def stripe_key(config: Config) -> Iterable[str]:
    if config.agent.stripe_api_key is None:
        yield "STRIPE_API_KEY is not set: set a Stripe test-mode key (sk_test_…) in .env first"


def check(config: Config, *checks: Check) -> Config:
    """Run `checks`; every problem found goes into one ConfigError line."""
    problems = [problem for each in checks for problem in each(config)]
    if problems:
        raise ConfigError("; ".join(problems))
    return config


def _has(secret: SecretStr | None) -> bool:
    return secret is not None and bool(secret.get_secret_value())


# The checks each command needs before it starts anything.
RUN: tuple[Check, ...] = (
    temporal_tls_files,
    data_dir_writable,
    decider_ready,
    slack_complete,
    discord_complete,
)
# The bot records a conversation's decider but never calls the model: no OPENAI_API_KEY needed.
BOT: tuple[Check, ...] = (
    temporal_tls_files,
    data_dir_writable,
    a_chat_platform,
    slack_complete,
    discord_complete,
)
DEMO: tuple[Check, ...] = (temporal_tls_files, data_dir_writable, decider_ready)
WORKER: tuple[Check, ...] = (temporal_tls_files, data_dir_writable, decider_ready)
STATUS: tuple[Check, ...] = (temporal_tls_files,)
CODEC_SERVER: tuple[Check, ...] = (temporal_tls_files,)
DISCORD_SYNC: tuple[Check, ...] = (discord_token,)
STRIPE_SETUP: tuple[Check, ...] = (stripe_key, data_dir_writable)

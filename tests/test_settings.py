"""`.env.example` documents every setting, and a copy of it is a working configuration."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from agent.settings import AgentSettings, CodecServerSettings, TemporalSettings
from bot.discord.settings import DiscordSettings
from bot.slack.settings import SlackSettings
from refund_bot.config import setting_names
from worker.runner import build_worker
from worker.settings import ProcessSettings

EXAMPLE = Path(__file__).parent.parent / ".env.example"


def test_env_example_documents_every_setting() -> None:
    documented = set(re.findall(r"^([A-Z][A-Z0-9_]+)=", EXAMPLE.read_text(), re.MULTILINE))
    known = setting_names()
    assert known - documented == set(), "settings missing from .env.example"
    assert documented - known == set(), ".env.example names settings nobody reads"


def test_a_copy_of_env_example_runs_offline(monkeypatch) -> None:
    for name in setting_names():
        monkeypatch.delenv(name, raising=False)
    temporal = TemporalSettings(_env_file=EXAMPLE)
    agent = AgentSettings(_env_file=EXAMPLE)
    assert temporal.api_key is None and temporal.tls_cert_path is None
    assert agent.effect_mode == "ledger" and agent.admins == [] and agent.codec_keys is None
    server = CodecServerSettings(_env_file=EXAMPLE)
    assert server.host == "127.0.0.1" and server.token is None
    # Its empty DEMO_CUSTOMER_FOR_NEW_USERS links no chat user to the demo customer.
    assert [agent.demo_customer_for(p) for p in ("local", "slack", "discord")] == [None] * 3
    assert not SlackSettings(_env_file=EXAMPLE).enabled
    assert not DiscordSettings(_env_file=EXAMPLE).enabled


def test_the_workflow_cache_size_is_a_bounded_setting(monkeypatch) -> None:
    monkeypatch.setenv("WORKER_CACHED_CONVERSATIONS", "250")
    assert ProcessSettings(_env_file=None).cached_conversations == 250
    monkeypatch.delenv("WORKER_CACHED_CONVERSATIONS")
    assert ProcessSettings(_env_file=None).cached_conversations == 1000  # the SDK's default
    monkeypatch.setenv("WORKER_CACHED_CONVERSATIONS", "1000000")  # an extra zero or three
    with pytest.raises(ValidationError):
        ProcessSettings(_env_file=None)


def test_the_sticky_timeout_is_a_bounded_setting_in_seconds(monkeypatch) -> None:
    assert ProcessSettings(_env_file=None).sticky_timeout == timedelta(seconds=1)
    monkeypatch.setenv("WORKER_STICKY_TIMEOUT", "60")
    assert ProcessSettings(_env_file=None).sticky_timeout == timedelta(seconds=60)
    for unusable in ("0", "86400", "soon"):
        monkeypatch.setenv("WORKER_STICKY_TIMEOUT", unusable)
        with pytest.raises(ValidationError):
            ProcessSettings(_env_file=None)


async def test_the_worker_caches_and_waits_on_its_sticky_queue_as_set(
    client, agent_settings, threads
) -> None:
    worker = await build_worker(
        client,
        "test-cache-size",
        agent_settings,
        {"local": threads},
        cached_conversations=250,
        sticky_timeout=timedelta(seconds=45),
    )
    assert worker.conversations.config()["max_cached_workflows"] == 250
    assert worker.conversations.config()["sticky_queue_schedule_to_start_timeout"] == timedelta(
        seconds=45
    )

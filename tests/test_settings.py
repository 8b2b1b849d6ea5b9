"""`.env.example` documents every setting, and a copy of it is a working configuration."""

from __future__ import annotations

import re
from pathlib import Path

from agent.settings import AgentSettings, CodecServerSettings, TemporalSettings
from bot.discord.settings import DiscordSettings
from bot.slack.settings import SlackSettings
from refund_bot.config import setting_names

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

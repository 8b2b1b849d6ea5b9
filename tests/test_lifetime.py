"""No conversation outlives its window (docs/versioning.md): the settings are refused at start-up
when the life they allow does not fit in it, and the server holds every conversation the router
starts to it. (tests/test_versions.py checks the Workflow's waits and retry budgets against the
sum agent.lifetime makes.)"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from agent.lifetime import longest_life, longest_patience
from agent.models import Actor, ThreadRef, Timing
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from agent.versions import MAX_CONVERSATION_AGE
from bot.conversations import ConversationRouter, InboundMessage, Routed
from bot.ids import workflow_id_for
from bot.inbox import Inbox
from refund_bot.config import ConfigError, load, setting_names

CUSTOMER = Actor(platform="slack", user_id="U0CUSTOMER", display_name="Nyghtowl")


def _refusal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, patience: str) -> str:
    """The one line the settings become at start-up (refund_bot.config.load) with this patience."""
    for name in setting_names():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here
    monkeypatch.setenv("REFUND_OUTAGE_PATIENCE", patience)
    with pytest.raises(ConfigError) as refused:
        load()
    return str(refused.value)


def test_settings_whose_conversations_outlive_the_window_are_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    defaults = AgentSettings(_env_file=None)
    assert longest_life(defaults.timing()) <= MAX_CONVERSATION_AGE
    most = longest_patience(Timing())
    accepted = AgentSettings(_env_file=None, REFUND_OUTAGE_PATIENCE=most)
    assert longest_life(accepted.timing()) <= MAX_CONVERSATION_AGE

    line = _refusal(monkeypatch, tmp_path, f"{int(most.total_seconds()) + 60}s")
    assert "REFUND_OUTAGE_PATIENCE" in line and "30d window" in line and "\n" not in line
    line = _refusal(monkeypatch, tmp_path, "30d")
    # The sum, its parts, and what to set instead.
    assert "lets a conversation live 54d 1h 1m: its waits end at 21d" in line, line
    assert line.endswith("set REFUND_OUTAGE_PATIENCE to 5d or less"), line


async def test_a_conversation_the_router_starts_ends_by_the_window_on_the_server(
    client, agent_settings
) -> None:
    async def no_hold() -> bool:
        return False

    # A task queue no Worker polls: the start alone is what is checked.
    router = ConversationRouter(
        client, f"no-worker-{uuid.uuid4().hex[:8]}", Inbox(database_for(agent_settings)), no_hold
    )
    thread = ThreadRef(platform="slack", workspace="T1", channel="C2", thread=uuid.uuid4().hex)
    opening = InboundMessage(
        event_id=f"ev-{thread.thread}",
        thread=thread,
        message_id=f"m-{thread.thread}",
        author=CUSTOMER,
        text="please refund order 1234",
        opens_thread=True,
    )
    assert await router.on_message(opening) == Routed.STARTED
    handle = client.get_workflow_handle(workflow_id_for(thread))
    try:
        config = (await handle.describe()).raw_description.execution_config
        assert config.workflow_execution_timeout.ToTimedelta() == MAX_CONVERSATION_AGE
    finally:
        await handle.terminate("test over")

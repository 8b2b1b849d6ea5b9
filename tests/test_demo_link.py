"""DEMO_CUSTOMER_FOR_NEW_USERS: who is linked to the demo customer on first contact.

Unset: the local terminal channel's users only. A customer id: every platform's (a demo
workspace). Empty, in the environment or in .env: nobody. An unknown user who is not linked gets
exactly the answer an unknown order gets, whatever order they ask about.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.models import Actor, Platform
from agent.settings import DEMO_CUSTOMER, AgentSettings
from agent.stores.sqlite import SqliteDatabase
from bot.local.thread_store import LocalThreadStore
from harness.conversation import LocalConversation
from harness.inproc import running_worker

NAME = "DEMO_CUSTOMER_FOR_NEW_USERS"
PLATFORMS = ("local", "slack", "discord")


def _links(settings: AgentSettings) -> dict[str, str | None]:
    return {platform: settings.demo_customer_for(platform) for platform in PLATFORMS}


@pytest.fixture(autouse=True)
def _no_setting_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NAME, raising=False)


def test_unset_links_the_local_channels_users_only() -> None:
    settings = AgentSettings(_env_file=None)
    assert _links(settings) == {"local": DEMO_CUSTOMER, "slack": None, "discord": None}


def test_a_customer_id_links_every_platforms_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAME, "cus_marlow")
    settings = AgentSettings(_env_file=None)
    assert _links(settings) == dict.fromkeys(PLATFORMS, "cus_marlow")


def test_empty_in_the_environment_links_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAME, "")
    settings = AgentSettings(_env_file=None)
    assert _links(settings) == dict.fromkeys(PLATFORMS)


def test_empty_in_dot_env_links_nobody(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(f"{NAME}=\nDATA_DIR=\n")
    settings = AgentSettings(_env_file=env_file)
    assert _links(settings) == dict.fromkeys(PLATFORMS)
    assert settings.data_dir == Path(".data")  # every other empty setting still means "unset"


def test_the_environment_outranks_dot_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(f"{NAME}=\n")
    monkeypatch.setenv(NAME, DEMO_CUSTOMER)
    assert _links(AgentSettings(_env_file=env_file)) == dict.fromkeys(PLATFORMS, DEMO_CUSTOMER)
    env_file.write_text(f"{NAME}={DEMO_CUSTOMER}\n")
    monkeypatch.setenv(NAME, "")
    assert _links(AgentSettings(_env_file=env_file)) == dict.fromkeys(PLATFORMS)


@pytest.mark.parametrize(
    ("setting", "platform", "linked"),
    [
        (None, "local", True),
        (None, "slack", False),
        (None, "discord", False),
        ("", "local", False),
        ("", "slack", False),
        (DEMO_CUSTOMER, "slack", True),
        (DEMO_CUSTOMER, "discord", True),
    ],
)
async def test_an_unknown_user_is_linked_or_gets_the_unknown_order_answer(
    client, tmp_path: Path, setting: str | None, platform: Platform, linked: bool
) -> None:
    settings = AgentSettings(
        _env_file=None,
        data_dir=tmp_path,
        demo_customer_for_new_users=setting,
    )
    newcomer = Actor(platform=platform, user_id="U0NEWCOMER", display_name="New")
    threads = LocalThreadStore(SqliteDatabase(tmp_path))
    async with running_worker(client, settings, threads) as tq:
        conv = LocalConversation(client, threads, tq, customer=newcomer)
        handle = await conv.open("please refund order 1234")
        await conv.answer_until_decided()  # the questions, if the order is theirs to refund
        outcome = await handle.result()
    if linked:
        assert outcome.status == "refunded"  # the demo customer's order, refunded to them
    else:
        assert outcome.status == "denied"
        assert outcome.message == (
            "I can't refund this order. I couldn't find order 1234 on your account."
        )

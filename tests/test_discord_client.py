"""The Discord inbound half, through discord.py's own parsing, against a fake of Discord.

Every event is the JSON Discord's gateway dispatches (built by harness.fakes.discord_api for its own
state), fed to the client's real ConnectionState parsers, exactly as discord.py's gateway reader
does. Everything the client sends goes over discord.py's HTTP client and webhook adapter to the
FakeDiscordAPI. The router is a recording fake; the commands are the real `Commands` on real SQLite
stores, with a stub Temporal client and a fake Worker restart.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import discord
import pytest
from pydantic import SecretStr
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from agent.models import Actor, MessageKey, OutboundMessage, ThreadRef
from agent.settings import AgentSettings
from agent.stores.grants import GrantStore
from agent.stores.sqlite import SqliteDatabase
from agent.visibility import (
    AMOUNT_CENTS,
    APPROVERS_REMINDED,
    ORDER,
    STAGE,
    WAITING_FOR_APPROVAL,
    WAITING_SINCE,
)
from agent.workflow import RefundConversation
from bot.commands import GRANTABLE_ROLES, ChannelRef, Commands
from bot.conversations import MAX_SIGNAL_TEXT, NOTICES, InboundClick, Routed
from bot.discord import replies, slash_commands
from bot.discord.client import build_client
from bot.discord.commands_spec import MANIFEST_PATH, load_manifest, mismatches, sync_commands
from bot.discord.edge import UNREADABLE_COMMAND
from bot.discord.grants import DiscordRoleGrants
from bot.discord.outbound import DiscordThreadPoster
from bot.discord.settings import DEFAULT_APPROVER_ROLE_LIMIT_CENTS, DiscordSettings
from bot.hold import HoldSwitch
from bot.ids import workflow_id_for
from demo.discord_stage import DiscordStage
from harness.conditions import wait_for
from harness.fakes.discord_api import (
    CALLBACK_ROUTE,
    EDIT_ORIGINAL_ROUTE,
    EPHEMERAL,
    FOLLOWUP_ROUTE,
    GLOBAL_COMMANDS_ROUTE,
    GUILD_COMMANDS_ROUTE,
    MEMBER_ROUTE,
    MESSAGES_ROUTE,
    ROLES_ROUTE,
    THREADS_ROUTE,
    FakeDiscordAPI,
    Interaction,
)
from harness.recording_router import RecordingRouter
from tests.support.customer_text import ANSWERS_LINE, hostile_status
from tests.support.discord_client import (
    Bot,
    FakeRestart,
    StagingDemos,
    StubTemporal,
    connected,
    custom_ids,
    discord_actor,
)
from tests.support.discord_guild import (
    ADMIN,
    AGENT,
    APPROVER_ROLE,
    APPROVER_ROLE_NAME,
    CUSTOMER,
    GUILD,
    OTHER,
    OTHER_BOT,
    PRESENTER,
    STRANGER,
    SUPPORT,
    seed_guild,
)

CLICK_UPDATE = 7  # UPDATE_MESSAGE
CLICK_DEFER = 6  # DEFERRED_UPDATE_MESSAGE
MESSAGE_REPLY = 4  # CHANNEL_MESSAGE_WITH_SOURCE
DEFERRED_REPLY = 5  # DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
async def api() -> AsyncIterator[FakeDiscordAPI]:
    async with FakeDiscordAPI() as fake:
        seed_guild(fake)
        yield fake


@pytest.fixture
def settings(api: FakeDiscordAPI) -> DiscordSettings:
    return DiscordSettings(
        _env_file=None,
        token=SecretStr(api.token),
        support_channel_id=SUPPORT,
        guild_id=GUILD,
        approver_role=str(APPROVER_ROLE),
        api_url=api.api_url,
    )


@pytest.fixture
async def store(tmp_path: Path) -> GrantStore:
    grants = GrantStore(SqliteDatabase(tmp_path))
    seed = Actor(platform="local", user_id="seed")
    await grants.grant(discord_actor(PRESENTER), "presenter", None, by=seed)
    await grants.grant(discord_actor(ADMIN), "admin", None, by=seed)
    return grants


@pytest.fixture
def router() -> RecordingRouter:
    return RecordingRouter()


@pytest.fixture
def temporal() -> StubTemporal:
    return StubTemporal()


@pytest.fixture
def restart() -> FakeRestart:
    return FakeRestart()


@pytest.fixture
def hold(tmp_path: Path) -> HoldSwitch:
    return HoldSwitch(SqliteDatabase(tmp_path), default=False)


@pytest.fixture
def demos() -> StagingDemos:
    return StagingDemos()


@pytest.fixture
def commands(
    tmp_path: Path,
    store: GrantStore,
    temporal: StubTemporal,
    restart: FakeRestart,
    hold: HoldSwitch,
    demos: StagingDemos,
) -> Commands:
    agent_settings = AgentSettings(_env_file=None, data_dir=tmp_path)
    # StubTemporal stands in for temporalio's Client: the calls the commands make.
    return Commands(temporal, restart, agent_settings, store, hold, demos)  # type: ignore[arg-type]


@pytest.fixture
async def bot(
    api: FakeDiscordAPI,
    settings: DiscordSettings,
    router: RecordingRouter,
    commands: Commands,
    store: GrantStore,
) -> AsyncIterator[Bot]:
    # login() sets the routed webhook adapter in this fixture's context; pytest-asyncio hands an
    # async fixture's context variables on to the test, so the test's event tasks inherit it.
    async with connected(api, settings, router, commands, store) as b:
        yield b


async def post_escalation(
    api: FakeDiscordAPI, thread_id: int, text: str, round: int | None = None
) -> dict[str, Any]:
    """The Worker's post_to_thread: a separate REST-only poster, as in the Worker process.
    Without a round: buttons as they were posted before escalation rounds existed."""
    workflow_id = workflow_id_for(
        ThreadRef(
            platform="discord", workspace=str(GUILD), channel=str(SUPPORT), thread=str(thread_id)
        )
    )
    message = OutboundMessage(
        thread=ThreadRef(
            platform="discord", workspace=str(GUILD), channel=str(SUPPORT), thread=str(thread_id)
        ),
        key=MessageKey(workflow_id=workflow_id, run_id="run-1", seq=7),
        kind="escalation",
        text=text,
        actions=["approve", "deny"],
        round=round,
    )
    async with DiscordThreadPoster(SecretStr(api.token), api_url=api.api_url) as poster:
        posted = await poster.post(message)
    stored = api.message(thread_id, posted.platform_message_id)
    assert stored is not None
    return stored


def interaction(api: FakeDiscordAPI, payload: dict[str, Any]) -> Interaction:
    return api.interactions[int(payload["id"])]


async def answered(api: FakeDiscordAPI, payload: dict[str, Any], followups: int = 0) -> Interaction:
    """Wait until the interaction got its initial response (and `followups` followups)."""
    record = interaction(api, payload)

    async def probe() -> bool:
        return bool(record.callbacks) and len(record.followups) >= followups

    await wait_for(probe, timeout=10, what=f"interaction {record.id} answered")
    return record


# -- customer messages --------------------------------------------------------------------------


async def test_first_message_opens_a_thread_and_a_conversation(bot: Bot) -> None:
    message_id = await bot.post(SUPPORT, CUSTOMER, "My lamp arrived broken, order 1042")
    await wait_for(bot.routed_after(0), what="the opening message routed")

    [thread_request] = bot.api.requests_to(THREADS_ROUTE)
    assert thread_request.path == f"/channels/{SUPPORT}/messages/{message_id}/threads"
    assert thread_request.status == 201
    thread = bot.api.channel(message_id)  # a thread on a message takes the message's id
    assert thread is not None and thread["type"] == 11 and thread["parent_id"] == str(SUPPORT)
    assert "nyghtowl" in thread["name"]

    [routed] = bot.router.messages
    assert routed.opens_thread is True
    assert routed.thread == ThreadRef(
        platform="discord", workspace=str(GUILD), channel=str(SUPPORT), thread=thread["id"]
    )
    assert workflow_id_for(routed.thread) == f"discord-{GUILD}-{thread['id']}"
    assert routed.event_id == routed.message_id == message_id
    assert routed.author == Actor(
        platform="discord", user_id=str(CUSTOMER), display_name="nyghtowl"
    )
    assert routed.text == "My lamp arrived broken, order 1042"
    assert not routed.from_bot and not routed.edited_or_deleted
    # STARTED has no notice: the agent's first question is the answer.
    assert bot.api.requests_to(MESSAGES_ROUTE) == []


async def test_thread_reply_becomes_a_signal(bot: Bot) -> None:
    thread_id = await bot.open_conversation()
    reply_id = await bot.post(thread_id, CUSTOMER, "It's order 1042")
    await wait_for(bot.routed_after(1), what="the reply routed")

    opening, reply = bot.router.messages
    assert reply.opens_thread is False
    assert reply.thread == opening.thread
    assert reply.message_id == reply_id and reply.text == "It's order 1042"
    assert len(bot.api.requests_to(THREADS_ROUTE)) == 1  # no second thread
    assert bot.api.requests_to("GET /channels/{channel_id}") == []  # the thread was cached


async def test_reply_in_a_thread_the_cache_missed_is_looked_up(bot: Bot) -> None:
    message_id = await bot.post(SUPPORT, CUSTOMER, "Refund please")
    await wait_for(bot.routed_after(0), what="the opening message routed")
    # No THREAD_CREATE reached this client (another replica opened it, say): the reply's channel
    # is unknown to discord.py, so the client asks Discord what it is.
    await bot.post(int(message_id), CUSTOMER, "order 1042")
    await wait_for(bot.routed_after(1), what="the reply routed")

    assert bot.router.messages[1].thread == bot.router.messages[0].thread
    [lookup] = bot.api.requests_to("GET /channels/{channel_id}")
    assert lookup.path == f"/channels/{message_id}"


async def test_one_threads_messages_are_routed_in_order_one_at_a_time(bot: Bot) -> None:
    thread_id = await bot.open_conversation()
    bot.router.gate = asyncio.Event()  # the router is slow: Temporal takes its time
    first = await bot.post(thread_id, CUSTOMER, "order 1042")
    await wait_for(bot.routed_after(1), what="the first reply routed")
    second = await bot.post(thread_id, CUSTOMER, "it is cracked")
    third = await bot.post(thread_id, CUSTOMER, "and it smells")
    # New conversations are not held up by this one, nor by each other.
    opening_a = await bot.post(SUPPORT, STRANGER, "my order never came")
    opening_b = await bot.post(SUPPORT, PRESENTER, "wrong colour")
    await wait_for(bot.routed_after(3), what="the new conversations routed")
    assert [m.message_id for m in bot.router.arrived[1:]] == [first, opening_a, opening_b]

    bot.router.gate.set()
    await wait_for(bot.routed_after(5), what="the held replies routed")
    assert [m.message_id for m in bot.router.arrived[4:]] == [second, third]


async def test_a_thread_reply_from_someone_else_still_reaches_the_router(bot: Bot) -> None:
    # The Workflow, not the adapter, decides that only the customer answers.
    thread_id = await bot.open_conversation()
    await bot.post(thread_id, STRANGER, "order 9999, refund it to me")
    await wait_for(bot.routed_after(1), what="the stranger's message routed")

    stranger = bot.router.messages[1]
    assert stranger.author == Actor(
        platform="discord", user_id=str(STRANGER), display_name="mallory"
    )
    assert stranger.thread == bot.router.messages[0].thread
    assert stranger.opens_thread is False


async def test_bots_edits_deletions_and_other_channels_are_ignored(bot: Bot) -> None:
    thread_id = await bot.open_conversation()
    customer_reply = await bot.post(thread_id, CUSTOMER, "order 1042")
    await wait_for(bot.routed_after(1), what="the reply routed")
    routed_before = len(bot.router.messages)

    # This bot's own post in the thread (the Worker's question comes back over the gateway) ...
    await bot.post(thread_id, int(bot.api.bot_user["id"]), "What is your order number?", bot=True)
    # ... another bot, in the support channel and in the thread ...
    await bot.post(SUPPORT, OTHER_BOT, "I am a bot", bot=True)
    await bot.post(thread_id, OTHER_BOT, "I am a bot", bot=True)
    # ... the customer editing and deleting ...
    bot.gateway("MESSAGE_UPDATE", bot.api.message_update_event(thread_id, customer_reply, "1043!"))
    bot.gateway("MESSAGE_DELETE", bot.api.message_delete_event(thread_id, customer_reply))
    # ... and a message in another channel.
    await bot.post(OTHER, CUSTOMER, "hello general")
    # A marker that is routed: once it is, every event above has been handled.
    await bot.post(thread_id, CUSTOMER, "marker")
    await wait_for(bot.routed_after(routed_before), what="the marker routed")

    assert [m.text for m in bot.router.messages[routed_before:]] == ["marker"]
    assert (
        len(bot.api.requests_to(THREADS_ROUTE)) == 1
    )  # no thread for the bot or the other channel


async def test_an_oversized_message_is_cut_before_the_router(bot: Bot) -> None:
    await bot.post(SUPPORT, CUSTOMER, "x" * 4000)  # a Nitro member may send 4000 characters
    await wait_for(bot.routed_after(0), what="the long message routed")
    [routed] = bot.router.messages
    assert len(routed.text) <= MAX_SIGNAL_TEXT
    assert routed.text.startswith("x" * 100)


@pytest.mark.parametrize("result", [Routed.QUEUED, Routed.CLOSED])
async def test_the_notice_for_the_result_goes_into_the_thread_without_pings(
    bot: Bot, result: Routed
) -> None:
    thread_id = await bot.open_conversation()
    bot.router.message_result = result
    await bot.post(thread_id, CUSTOMER, "@everyone <@1180000000000000102> hello?")
    await wait_for(bot.routed_after(1), what="the reply routed")

    async def notice() -> list[dict[str, Any]]:
        return bot.api.messages(thread_id)[-1:] if bot.api.requests_to(MESSAGES_ROUTE) else []

    [posted] = await wait_for(notice, what="the notice posted")
    assert posted["content"] == NOTICES[result]
    assert posted["author"]["id"] == bot.api.bot_user["id"]
    [request] = bot.api.requests_to(MESSAGES_ROUTE)
    assert request.path == f"/channels/{thread_id}/messages"
    assert request.json["allowed_mentions"] == {"parse": []}


# -- Approve / Deny -----------------------------------------------------------------------------


async def test_a_click_becomes_an_approval_and_the_buttons_go(bot: Bot) -> None:
    thread_id = await bot.open_conversation()
    escalation = await post_escalation(bot.api, thread_id, "Refund $250.00 for order 1042?")
    [approve, deny] = custom_ids(escalation)
    workflow_id = f"discord-{GUILD}-{thread_id}"
    assert (approve, deny) == (f"refund:approve:{workflow_id}", f"refund:deny:{workflow_id}")

    click = bot.api.component_interaction(thread_id, escalation["id"], AGENT, approve)
    bot.gateway("INTERACTION_CREATE", click)
    await wait_for(lambda: _async(bool(bot.router.clicks)), what="the click routed")

    [routed] = bot.router.clicks
    assert routed == InboundClick(
        event_id=click["id"],
        workflow_id=workflow_id,
        decision="approve",
        actor=Actor(platform="discord", user_id=str(AGENT), display_name="Sam (support)"),
        click_id=click["id"],
    )
    record = await answered(bot.api, click)
    [request] = bot.api.requests_to(CALLBACK_ROUTE)
    assert request.path == f"/interactions/{click['id']}/{click['token']}/callback"
    [callback] = record.callbacks
    assert callback["type"] == CLICK_UPDATE
    assert callback["data"]["components"] == []
    assert callback["data"]["allowed_mentions"] == {"parse": []}
    edited = bot.api.message(thread_id, escalation["id"])
    assert edited is not None and edited["components"] == []
    assert edited["content"].startswith("Refund $250.00 for order 1042?")
    assert edited["content"].endswith(f"Approved by <@{AGENT}>, checking authorization.")
    # The pre-check read the member's roles live from Discord.
    [member_read] = bot.api.requests_to(MEMBER_ROUTE)
    assert member_read.path == f"/guilds/{GUILD}/members/{AGENT}"
    assert record.followups == []  # SIGNALLED: nothing more to say


async def test_deny_is_a_decision_too(bot: Bot) -> None:
    thread_id = await bot.open_conversation()
    escalation = await post_escalation(bot.api, thread_id, "Refund $250.00?")
    deny = custom_ids(escalation)[1]
    bot.gateway(
        "INTERACTION_CREATE",
        bot.api.component_interaction(thread_id, escalation["id"], AGENT, deny),
    )
    await wait_for(lambda: _async(bool(bot.router.clicks)), what="the click routed")
    assert bot.router.clicks[0].decision == "deny"
    edited = bot.api.message(thread_id, escalation["id"])
    assert edited is not None and edited["content"].endswith(
        f"Denied by <@{AGENT}>, checking authorization."
    )


async def test_a_click_after_a_restart_still_works(
    api: FakeDiscordAPI,
    settings: DiscordSettings,
    router: RecordingRouter,
    commands: Commands,
    store: GrantStore,
) -> None:
    async with connected(api, settings, router, commands, store) as first:
        thread_id = await first.open_conversation()
    # The Worker escalates while the bot is down.
    escalation = await post_escalation(api, thread_id, "Refund $250.00?")

    # A new process: new client, new ConnectionState, no view ever stored for this message.
    async with connected(api, settings, router, commands, store) as second:
        assert second.client._connection._view_store.persistent_views == []
        approve = custom_ids(escalation)[0]
        click = api.component_interaction(thread_id, escalation["id"], AGENT, approve)
        second.gateway("INTERACTION_CREATE", click)
        await wait_for(lambda: _async(bool(router.clicks)), what="the click routed")
        record = await answered(api, click)

    assert router.clicks[0].workflow_id == f"discord-{GUILD}-{thread_id}"
    assert record.callbacks[0]["type"] == CLICK_UPDATE
    edited = api.message(thread_id, escalation["id"])
    assert edited is not None and edited["components"] == []


async def test_a_click_without_the_role_is_refused_privately(bot: Bot) -> None:
    thread_id = await bot.open_conversation()
    escalation = await post_escalation(bot.api, thread_id, "Refund $250.00?")
    approve = custom_ids(escalation)[0]

    click = bot.api.component_interaction(thread_id, escalation["id"], STRANGER, approve)
    bot.gateway("INTERACTION_CREATE", click)
    record = await answered(bot.api, click)

    [callback] = record.callbacks
    assert callback["type"] == MESSAGE_REPLY
    assert callback["data"]["flags"] & EPHEMERAL
    assert "mallory" in callback["data"]["content"]
    assert "Nothing changed" in callback["data"]["content"]
    assert f"<@&{APPROVER_ROLE}>" in callback["data"]["content"]
    assert callback["data"]["allowed_mentions"] == {"parse": []}
    assert bot.router.clicks == []
    unchanged = bot.api.message(thread_id, escalation["id"])
    assert unchanged == escalation  # buttons still there for someone who may press them


async def test_a_role_removed_a_moment_ago_is_seen_at_the_next_click(bot: Bot) -> None:
    thread_id = await bot.open_conversation()
    escalation = await post_escalation(bot.api, thread_id, "Refund $250.00?")
    bot.api.set_member_roles(GUILD, AGENT, ())  # an admin takes the role away in Discord

    click = bot.api.component_interaction(
        thread_id, escalation["id"], AGENT, custom_ids(escalation)[0]
    )
    bot.gateway("INTERACTION_CREATE", click)
    record = await answered(bot.api, click)
    assert record.callbacks[0]["data"]["flags"] & EPHEMERAL
    assert bot.router.clicks == []


@pytest.mark.parametrize("allowed", [True, False])
async def test_a_slow_pre_check_defers_and_answers_later(
    api: FakeDiscordAPI,
    settings: DiscordSettings,
    router: RecordingRouter,
    commands: Commands,
    store: GrantStore,
    allowed: bool,
) -> None:
    release = asyncio.Event()

    async def slow_check(actor: Actor) -> bool:
        await release.wait()
        return allowed

    async with connected(api, settings, router, commands, store, can_approve=slow_check) as bot:
        bot.client.parts.response_budget = 0.05
        thread_id = await bot.open_conversation()
        escalation = await post_escalation(api, thread_id, "Refund $250.00?")
        click = api.component_interaction(
            thread_id, escalation["id"], AGENT, custom_ids(escalation)[0]
        )
        bot.gateway("INTERACTION_CREATE", click)
        record = await answered(api, click)  # the deferral, while the check is still running
        assert [c["type"] for c in record.callbacks] == [CLICK_DEFER]
        release.set()

        if allowed:
            await wait_for(lambda: _async(bool(router.clicks)), what="the click routed")
            [edit] = await wait_for(
                lambda: _async(api.requests_to(EDIT_ORIGINAL_ROUTE)), what="the message edited"
            )
            assert edit.json["components"] == []
            edited = api.message(thread_id, escalation["id"])
            assert edited is not None and edited["components"] == []
        else:
            record = await answered(api, click, followups=1)
            assert record.followups[0]["flags"] & EPHEMERAL
            assert router.clicks == []
            assert api.message(thread_id, escalation["id"]) == escalation


async def test_a_click_carries_the_round_of_its_buttons(bot: Bot) -> None:
    thread_id = await bot.open_conversation()
    escalation = await post_escalation(bot.api, thread_id, "Refund $250.00?", round=4)
    approve = custom_ids(escalation)[0]
    assert approve == f"refund:approve:r4:discord-{GUILD}-{thread_id}"

    bot.gateway(
        "INTERACTION_CREATE",
        bot.api.component_interaction(thread_id, escalation["id"], AGENT, approve),
    )
    await wait_for(lambda: _async(bool(bot.router.clicks)), what="the click routed")
    [routed] = bot.router.clicks
    assert (routed.workflow_id, routed.round) == (f"discord-{GUILD}-{thread_id}", 4)


async def test_a_click_on_a_passed_round_is_sent_once_for_the_workflow_to_answer(bot: Bot) -> None:
    """Nothing asks the Workflow first whether round 1 is still open: the click is answered with
    the edit and routed like any other, one Signal. The Workflow drops a click whose round has
    passed and edits that round's message again with its outcome (tests/test_rounds.py)."""
    thread_id = await bot.open_conversation()
    escalation = await post_escalation(bot.api, thread_id, "Refund $250.00?", round=1)

    click = bot.api.component_interaction(
        thread_id, escalation["id"], AGENT, custom_ids(escalation)[0]
    )
    bot.gateway("INTERACTION_CREATE", click)
    await wait_for(lambda: _async(bool(bot.router.clicks)), what="the click routed")
    record = await answered(bot.api, click)

    [callback] = record.callbacks
    assert callback["type"] == CLICK_UPDATE
    [routed] = bot.router.clicks
    assert (routed.workflow_id, routed.round) == (f"discord-{GUILD}-{thread_id}", 1)
    edited = bot.api.message(thread_id, escalation["id"])
    assert edited is not None and edited["components"] == []
    assert edited["content"].endswith(f"Approved by <@{AGENT}>, checking authorization.")
    assert record.followups == []  # SIGNALLED: the thread says what became of it


async def test_a_click_on_a_finished_conversation_says_so(bot: Bot) -> None:
    thread_id = await bot.open_conversation()
    escalation = await post_escalation(bot.api, thread_id, "Refund $250.00?")
    bot.router.click_result = Routed.CLOSED

    click = bot.api.component_interaction(
        thread_id, escalation["id"], AGENT, custom_ids(escalation)[0]
    )
    bot.gateway("INTERACTION_CREATE", click)
    record = await answered(bot.api, click, followups=1)

    assert record.followups[0]["flags"] & EPHEMERAL
    assert "already finished" in record.followups[0]["content"]
    edited = bot.api.message(thread_id, escalation["id"])
    assert edited is not None and "already finished" in edited["content"]


async def test_a_click_the_router_cannot_take_puts_the_buttons_back(bot: Bot) -> None:
    thread_id = await bot.open_conversation()
    escalation = await post_escalation(bot.api, thread_id, "Refund $250.00?")
    bot.router.click_error = RuntimeError("Temporal refused the signal")

    click = bot.api.component_interaction(
        thread_id, escalation["id"], AGENT, custom_ids(escalation)[0]
    )
    bot.gateway("INTERACTION_CREATE", click)
    record = await answered(bot.api, click, followups=1)

    assert record.followups[0]["flags"] & EPHEMERAL
    restored = bot.api.message(thread_id, escalation["id"])
    assert restored is not None
    assert restored["content"] == escalation["content"]
    assert custom_ids(restored) == custom_ids(escalation)


# -- application commands -----------------------------------------------------------------------


async def run_command(
    bot: Bot,
    name: str,
    user_id: int,
    channel_id: int = SUPPORT,
    options: Mapping[str, str | int | bool] | None = None,
) -> str:
    """Run a slash command; returns the (ephemeral) text the caller saw."""
    payload = bot.api.command_interaction(name, channel_id, user_id, options)
    bot.gateway("INTERACTION_CREATE", payload)
    record = interaction(bot.api, payload)

    async def probe() -> bool:
        if not record.callbacks:
            return False
        return record.callbacks[0]["type"] == MESSAGE_REPLY or bool(record.followups)

    await wait_for(probe, timeout=10, what=f"/{name} answered")
    first = record.callbacks[0]
    assert first["data"]["flags"] & EPHEMERAL, f"/{name} must answer privately"
    if first["type"] == MESSAGE_REPLY:
        assert first["data"]["allowed_mentions"] == {"parse": []}
        return str(first["data"]["content"])
    assert first["type"] == DEFERRED_REPLY
    [followup] = record.followups
    assert followup["flags"] & EPHEMERAL
    [request] = [r for r in bot.api.requests_to(FOLLOWUP_ROUTE) if r.path.endswith(record.token)]
    assert request.json["allowed_mentions"] == {"parse": []}
    return str(followup["content"])


async def test_commands_are_registered_from_the_manifest_at_login(bot: Bot) -> None:
    [put] = bot.api.requests_to(GUILD_COMMANDS_ROUTE)
    assert put.path == f"/applications/{bot.api.application['id']}/guilds/{GUILD}/commands"
    assert put.json == list(load_manifest())
    assert [c["name"] for c in bot.api.commands[GUILD]] == [
        "crash-worker",
        "refund-status",
        "refund-release",
        "refund-hold",
        "refund-grant",
        "refund-revoke",
        "refund-demo",
        "refund-queue",
        "refund-takeover",
        "refund-handback",
    ]
    assert mismatches(bot.client.tree, load_manifest()) == []


def test_the_manifest_offers_exactly_the_grantable_roles() -> None:
    for name in ("refund-grant", "refund-revoke"):
        [spec] = [c for c in load_manifest() if c["name"] == name]
        [role] = [o for o in spec["options"] if o["name"] == "role"]
        assert tuple(c["value"] for c in role["choices"]) == GRANTABLE_ROLES


async def test_crash_worker(bot: Bot, restart: FakeRestart) -> None:
    refused = await run_command(bot, "crash-worker", STRANGER)
    assert "needs the presenter role" in refused and restart.calls == []

    text = await run_command(bot, "crash-worker", PRESENTER)
    assert restart.calls == [None]
    assert "replaced on test-host (supervisor pid 4000): old pid 4100, new pid 4200" in text
    assert "Other hosts with a supervisor: host-b" in text

    text = await run_command(bot, "crash-worker", PRESENTER, options={"host": "host-b"})
    assert restart.calls == [None, "host-b"] and "replaced on host-b" in text

    text = await run_command(bot, "crash-worker", PRESENTER, options={"host": "host-z"})
    assert restart.calls == [None, "host-b"]
    assert text == (
        "No Worker supervisor answers on host 'host-z'; they answer on: test-host, host-b."
    )


async def test_refund_status_in_a_thread_reads_that_conversation(
    bot: Bot, temporal: StubTemporal
) -> None:
    thread_id = await bot.open_conversation()
    workflow_id = f"discord-{GUILD}-{thread_id}"

    refused = await run_command(bot, "refund-status", STRANGER, thread_id)
    assert "needs the presenter or refund_approver role" in refused
    assert temporal.calls == []

    text = await run_command(bot, "refund-status", PRESENTER, thread_id)
    assert ("describe", workflow_id, "") in temporal.calls
    assert workflow_id in text


async def test_a_customers_answer_reaches_staff_as_the_characters_typed(
    bot: Bot, commands: Commands, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reproduces /refund-status showing a customer's answer raw: Discord rendered its bold,
    its masked link and its heading for the staff member reading it."""
    thread_id = await bot.open_conversation()
    workflow_id = f"discord-{GUILD}-{thread_id}"

    async def status(actor: Actor, conversation: Any) -> Any:
        return hostile_status(workflow_id)  # what Temporal's history would give, read

    monkeypatch.setattr(commands, "refund_status", status)
    payload = bot.api.command_interaction("refund-status", thread_id, PRESENTER, None)
    bot.gateway("INTERACTION_CREATE", payload)
    record = await answered(bot.api, payload, followups=1)
    [request] = [r for r in bot.api.requests_to(FOLLOWUP_ROUTE) if r.path.endswith(record.token)]
    assert request.json["content"] == hostile_status(workflow_id).shown()
    assert ANSWERS_LINE in request.json["content"].splitlines()
    assert request.json["allowed_mentions"] == {"parse": []}
    [followup] = record.followups
    assert followup["mentions"] == [] and followup["mention_everyone"] is False


async def test_refund_status_outside_a_thread_takes_the_conversation(
    bot: Bot, temporal: StubTemporal
) -> None:
    thread_id = await bot.open_conversation()
    workflow_id = f"discord-{GUILD}-{thread_id}"

    asked = await run_command(bot, "refund-status", PRESENTER, SUPPORT)
    assert asked == slash_commands.WHICH_CONVERSATION

    link = f"https://discord.com/channels/{GUILD}/{thread_id}"
    for given in (str(thread_id), link, workflow_id):
        temporal.calls.clear()
        await run_command(bot, "refund-status", PRESENTER, SUPPORT, {"conversation": given})
        assert temporal.calls == [("describe", workflow_id, "")], given


async def test_refund_release(bot: Bot, temporal: StubTemporal) -> None:
    thread_id = await bot.open_conversation()
    workflow_id = f"discord-{GUILD}-{thread_id}"
    temporal.running.add(workflow_id)

    refused = await run_command(bot, "refund-release", STRANGER, thread_id)
    assert "needs the presenter role" in refused and temporal.calls == []

    text = await run_command(bot, "refund-release", PRESENTER, thread_id)
    assert temporal.calls == [("signal", workflow_id, RefundConversation.release)]
    assert text == f"Released {workflow_id}: the refund goes ahead."


def waiting(workflow_id: str, order: str, cents: int, since: datetime, reminded: bool) -> Any:
    """One execution as visibility lists an escalation waiting for a decision."""
    return SimpleNamespace(
        id=workflow_id,
        typed_search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(STAGE, WAITING_FOR_APPROVAL),
                SearchAttributePair(ORDER, order),
                SearchAttributePair(AMOUNT_CENTS, cents),
                SearchAttributePair(WAITING_SINCE, since),
                SearchAttributePair(APPROVERS_REMINDED, reminded),
            ]
        ),
    )


async def test_refund_queue_lists_the_escalations_waiting_oldest_first(
    bot: Bot, temporal: StubTemporal, store: GrantStore
) -> None:
    await store.grant(
        discord_actor(AGENT), "refund_approver", 100000, by=Actor(platform="local", user_id="seed")
    )
    now = datetime.now(UTC)
    newer, older = f"discord-{GUILD}-1190000000000000002", f"discord-{GUILD}-1190000000000000001"
    temporal.listed = [
        waiting(newer, "7001", 12000, now - timedelta(minutes=5), False),
        waiting(older, "4500", 45000, now - timedelta(hours=2), True),
    ]

    refused = await run_command(bot, "refund-queue", STRANGER)
    assert "needs the refund_approver or presenter role" in refused and temporal.calls == []

    text = await run_command(bot, "refund-queue", AGENT)
    [(call, _, query)] = temporal.calls
    assert call == "list_workflows" and isinstance(query, str)
    assert "RefundBotStage = 'waiting_for_approval'" in query
    assert text.splitlines() == [
        "2 escalation(s) waiting for a decision, oldest first:",
        "• order 4500 ($450.00), waiting 2 hours, approvers reminded: "
        f"https://discord.com/channels/{GUILD}/1190000000000000001",
        "• order 7001 ($120.00), waiting 5 minutes, not reminded yet: "
        f"https://discord.com/channels/{GUILD}/1190000000000000002",
    ]

    temporal.listed = []
    assert await run_command(bot, "refund-queue", PRESENTER) == (
        "No escalation is waiting for a decision."
    )


async def test_refund_takeover_and_handback_in_the_thread_or_by_its_id(
    bot: Bot, temporal: StubTemporal
) -> None:
    thread_id = await bot.open_conversation()
    workflow_id = f"discord-{GUILD}-{thread_id}"
    temporal.running.add(workflow_id)

    refused = await run_command(bot, "refund-takeover", STRANGER, thread_id)
    assert "needs the refund_approver or presenter role" in refused and temporal.calls == []
    assert await run_command(bot, "refund-takeover", PRESENTER) == (
        slash_commands.WHICH_CONVERSATION  # in the support channel, naming no conversation
    )

    taken = await run_command(bot, "refund-takeover", PRESENTER, thread_id)
    assert taken.startswith(f"You have taken over {workflow_id}")
    back = await run_command(
        bot, "refund-handback", PRESENTER, SUPPORT, {"conversation": str(thread_id)}
    )
    assert back.startswith(f"Handed {workflow_id} back to the agent")
    pat = discord_actor(PRESENTER)
    assert [(w, args[0].taken, args[0].actor.user_id) for w, args in temporal.signalled] == [
        (workflow_id, True, pat.user_id),
        (workflow_id, False, pat.user_id),
    ]
    assert {name for _, _, name in temporal.calls} == {RefundConversation.takeover}


async def test_refund_hold(bot: Bot, hold: HoldSwitch) -> None:
    refused = await run_command(bot, "refund-hold", STRANGER, options={"state": "on"})
    assert "needs the presenter role" in refused
    assert await hold.enabled() is False

    text = await run_command(bot, "refund-hold", PRESENTER, options={"state": "on"})
    assert text.endswith("on.") and await hold.enabled() is True
    shown = await run_command(bot, "refund-hold", PRESENTER)
    assert shown.endswith("on.")
    await run_command(bot, "refund-hold", PRESENTER, options={"state": "off"})
    assert await hold.enabled() is False


async def test_refund_grant(bot: Bot, store: GrantStore) -> None:
    options: dict[str, str | int | bool] = {"user": STRANGER, "role": "presenter", "limit": "$500"}
    refused = await run_command(bot, "refund-grant", PRESENTER, options=options)
    assert "needs the admin role" in refused
    assert await store.live_grant(discord_actor(STRANGER), "presenter") is None

    text = await run_command(bot, "refund-grant", ADMIN, options=options)
    grant = await store.live_grant(discord_actor(STRANGER), "presenter")
    assert grant is not None and grant.limit_cents == 50000
    assert "Granted presenter to mallory" in text


async def test_refund_revoke(bot: Bot, store: GrantStore) -> None:
    options: dict[str, str | int | bool] = {"user": PRESENTER, "role": "presenter"}
    refused = await run_command(bot, "refund-revoke", STRANGER, options=options)
    assert "needs the admin role" in refused
    assert await store.live_grant(discord_actor(PRESENTER), "presenter") is not None

    text = await run_command(bot, "refund-revoke", ADMIN, options=options)
    assert await store.live_grant(discord_actor(PRESENTER), "presenter") is None
    assert text.startswith("Revoked presenter from pat")


async def test_refund_demo_from_a_non_presenter_is_refused_and_posts_nothing(
    bot: Bot, demos: StagingDemos
) -> None:
    thread_id = await bot.open_conversation()
    before = (bot.api.messages(SUPPORT), bot.api.messages(thread_id), len(bot.api.requests))
    for channel_id, options in ((SUPPORT, None), (thread_id, {"action": "next"})):
        refused = await run_command(bot, "refund-demo", STRANGER, channel_id, options)
        assert "needs the presenter role" in refused
    assert demos.calls == []
    # Nothing new in the channel or the thread: no root, no thread, no frame.
    assert (bot.api.messages(SUPPORT), bot.api.messages(thread_id)) == before[:2]
    sent = {r.route for r in bot.api.requests[before[2] :]}
    assert sent <= {CALLBACK_ROUTE, FOLLOWUP_ROUTE}, sent  # only the private answers


async def test_refund_demo_runs_the_story_on_discord_in_the_support_channel(
    bot: Bot, demos: StagingDemos
) -> None:
    thread_id = await bot.open_conversation()
    support = ChannelRef(platform="discord", workspace=str(GUILD), channel=str(SUPPORT))

    assert await run_command(bot, "refund-demo", PRESENTER) == "demo start"
    # Inside a thread, the demo is the thread's channel's: its parent.
    text = await run_command(bot, "refund-demo", PRESENTER, thread_id, {"action": "auto"})
    assert text == "demo auto"

    assert [(action, channel) for action, _, channel in demos.calls] == [
        ("", support),
        ("auto", support),
    ]
    assert all(isinstance(stage, DiscordStage) for _, stage, _ in demos.calls)
    # The stage posts with the bot's own client, to the channel's top level.
    posted = [m for m in bot.api.messages(SUPPORT) if m["embeds"]]
    assert [m["embeds"][0]["title"] for m in posted] == ["DEMO start", "DEMO auto"]
    assert all(m["author"]["id"] == bot.api.bot_user["id"] for m in posted)


async def test_a_failing_command_still_answers_privately(bot: Bot, temporal: StubTemporal) -> None:
    thread_id = await bot.open_conversation()
    temporal.fail_with = RPCError("permission denied", RPCStatusCode.PERMISSION_DENIED, b"")
    text = await run_command(bot, "refund-release", PRESENTER, thread_id)
    assert text == replies.FAILED


# -- sync-commands, the role grant source, settings -----------------------------------------------


@pytest.mark.parametrize("guild_id", [GUILD, None])
async def test_sync_commands_registers_the_manifest(
    api: FakeDiscordAPI, settings: DiscordSettings, guild_id: int | None
) -> None:
    names = await sync_commands(settings.model_copy(update={"guild_id": guild_id}))
    assert names == [c["name"] for c in load_manifest()]
    route = GUILD_COMMANDS_ROUTE if guild_id else GLOBAL_COMMANDS_ROUTE
    [put] = api.requests_to(route)
    assert put.json == list(load_manifest())
    assert put.path.startswith(f"/applications/{api.application['id']}/")
    assert api.requests_to("GET /oauth2/applications/@me")


async def test_sync_commands_rejects_a_bad_token(
    api: FakeDiscordAPI, settings: DiscordSettings
) -> None:
    with pytest.raises(discord.LoginFailure):
        await sync_commands(settings.model_copy(update={"token": SecretStr("wrong")}))


@pytest.mark.parametrize("configured", [str(APPROVER_ROLE), APPROVER_ROLE_NAME])
async def test_role_grants_read_current_roles(
    api: FakeDiscordAPI, settings: DiscordSettings, store: GrantStore, configured: str
) -> None:
    role_settings = settings.model_copy(
        update={"approver_role": configured, "approver_role_limit_cents": 25000}
    )
    grants = DiscordRoleGrants(role_settings, store)
    try:
        grant = await grants.live_grant(discord_actor(AGENT), "refund_approver")
        assert grant is not None and grant.limit_cents == 25000 and grant.role == "refund_approver"
        assert grant.grant_id == APPROVER_ROLE
        assert await grants.live_grant(discord_actor(STRANGER), "refund_approver") is None

        api.set_member_roles(GUILD, AGENT, ())
        assert await grants.live_grant(discord_actor(AGENT), "refund_approver") is None
        api.remove_member(GUILD, AGENT)
        assert await grants.live_grant(discord_actor(AGENT), "refund_approver") is None
    finally:
        await grants.close()
    by_name = configured == APPROVER_ROLE_NAME
    assert bool(api.requests_to(ROLES_ROUTE)) is by_name


async def test_role_grants_leave_other_roles_to_the_store(
    api: FakeDiscordAPI, settings: DiscordSettings, store: GrantStore
) -> None:
    grants = DiscordRoleGrants(settings, store)
    try:
        presenter = await grants.live_grant(discord_actor(PRESENTER), "presenter")
        assert presenter is not None and presenter.platform == "discord"
        local = Actor(platform="local", user_id="support")
        assert await grants.live_grant(local, "refund_approver") is None  # store, unseeded
    finally:
        await grants.close()
    assert api.requests_to(MEMBER_ROUTE) == []


async def test_without_a_role_the_store_decides(
    api: FakeDiscordAPI, settings: DiscordSettings, store: GrantStore
) -> None:
    grants = DiscordRoleGrants(settings.model_copy(update={"approver_role": None}), store)
    assert await grants.live_grant(discord_actor(AGENT), "refund_approver") is None
    await store.grant(discord_actor(AGENT), "refund_approver", 1000, by=discord_actor(ADMIN))
    grant = await grants.live_grant(discord_actor(AGENT), "refund_approver")
    assert grant is not None and grant.limit_cents == 1000
    assert api.requests_to(MEMBER_ROUTE) == []


def test_a_role_needs_a_guild(settings: DiscordSettings, store: GrantStore) -> None:
    with pytest.raises(ValueError, match="DISCORD_GUILD_ID"):
        DiscordRoleGrants(settings.model_copy(update={"guild_id": None}), store)


def test_a_blank_role_limit_means_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISCORD_APPROVER_ROLE_LIMIT_CENTS", "")
    assert DiscordSettings(_env_file=None).approver_role_limit_cents == (
        DEFAULT_APPROVER_ROLE_LIMIT_CENTS
    )
    monkeypatch.setenv("DISCORD_APPROVER_ROLE_LIMIT_CENTS", "50000")
    assert DiscordSettings(_env_file=None).approver_role_limit_cents == 50000


def test_the_client_asks_for_the_intents_it_needs(
    settings: DiscordSettings, router: RecordingRouter, commands: Commands
) -> None:
    client = build_client(settings, router, commands, can_approve=_allow)
    assert (
        client.intents.guilds and client.intents.guild_messages and client.intents.message_content
    )
    assert not client.intents.members and not client.intents.presences  # nothing else privileged
    assert client.allowed_mentions is not None
    # dict(): the payload's TypedDict names every key, while to_dict() gives only those set.
    assert dict(client.allowed_mentions.to_dict()) == {"parse": []}


def test_build_client_needs_a_grant_source(
    settings: DiscordSettings, router: RecordingRouter, commands: Commands
) -> None:
    with pytest.raises(ValueError, match="grants"):
        build_client(settings, router, commands)


def test_the_manifest_is_valid_json_for_discord() -> None:
    manifest = json.loads(MANIFEST_PATH.read_text())
    for command in manifest:
        assert 1 <= len(command["description"]) <= 100
        required = [o.get("required", False) for o in command["options"]]
        assert required == sorted(required, reverse=True), "required options come first"


# -- hostile payloads ---------------------------------------------------------------------------


def loud(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What input must never cause: a traceback, or anything at ERROR."""
    return [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def _with(payload: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`payload`, copied, with the field at a dotted `path` set to `value` (MISSING: removed)."""
    changed = copy.deepcopy(payload)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = changed
    for part in parents:
        node = node[part]
    if value is MISSING_FIELD:
        node.pop(last, None)
    else:
        node[last] = value
    return changed


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING_FIELD = _Missing()  # a field left out
HOSTILE_MESSAGE_FIELDS = [
    ("content", 5),
    ("content", None),
    ("type", {"a": 1}),
    ("id", "9" * 5000),
    ("channel_id", "x"),
    ("guild_id", [1]),
    ("author", None),
    ("author.id", None),
    ("author.username", 7),
    ("member", "x"),
    ("member.nick", ["sam"]),
    ("mentions", [1]),
    ("mention_roles", "x"),
    ("embeds", [1]),
    ("edited_timestamp", "not a time"),
    ("attachments", None),
    ("content", MISSING_FIELD),
    ("author.discriminator", MISSING_FIELD),  # discord.py swallows the KeyError: no author
    ("author.avatar", MISSING_FIELD),
]


@pytest.mark.parametrize(
    ("path", "value"),
    HOSTILE_MESSAGE_FIELDS,
    ids=[f"{p}={v!r:.20}" for p, v in HOSTILE_MESSAGE_FIELDS],
)
async def test_a_message_event_that_does_not_fit_is_kept_and_the_gateway_goes_on(
    bot: Bot, path: str, value: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces MESSAGE_CREATE payloads with fields of unexpected types raising out of
    discord.py's parser (which ended the gateway connection, the message lost) or out of
    on_message with a traceback (content not a string, type not hashable)."""
    thread_id = await bot.open_conversation()
    sent = []
    for channel in (SUPPORT, thread_id):
        event = _with(bot.api.user_message(channel, CUSTOMER, "refund 1234"), path, value)
        sent.append(event["id"])
        bot.gateway("MESSAGE_CREATE", event)  # never raises into the gateway's reader
    await wait_for(lambda: _async(len(bot.router.unreadable) == 2), what="two dead letters")
    assert all(u.platform == "discord" and u.kind == "message" for u in bot.router.unreadable)
    assert [json.loads(u.payload)["id"] for u in bot.router.unreadable] == sent
    before = len(bot.router.arrived)
    await bot.post(thread_id, CUSTOMER, "still listening")
    await wait_for(bot.routed_after(before), what="the next message routed")
    assert loud(caplog) == []


HOSTILE_CLICK_FIELDS = [
    ("data.custom_id", 5),
    ("data.custom_id", "refund:approve:" + "x" * 200),
    ("data.component_type", [1]),
    ("data", None),
    ("member.user.id", "x"),
    ("member.nick", 5),
    ("member", MISSING_FIELD),
    ("message.content", None),
    ("message.id", "9" * 5000),
    ("application_id", "x"),
    ("entitlements", 5),
    ("authorizing_integration_owners", [1]),
    ("message.flags", "x"),  # read in discord.py's task for the buttons
    ("message.components", MISSING_FIELD),
    ("message.components.0.components.0.style", MISSING_FIELD),
]


@pytest.mark.parametrize(
    ("path", "value"), HOSTILE_CLICK_FIELDS, ids=[f"{p}={v!r:.20}" for p, v in HOSTILE_CLICK_FIELDS]
)
async def test_a_click_that_does_not_fit_is_kept_and_the_gateway_goes_on(
    bot: Bot, path: str, value: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces INTERACTION_CREATE payloads with fields of unexpected types raising out of
    discord.py's parser: the connection ended and the click was lost."""
    thread_id = await bot.open_conversation()
    escalation = await post_escalation(bot.api, thread_id, "Refund $250.00?")
    approve = custom_ids(escalation)[0]
    click = bot.api.component_interaction(thread_id, escalation["id"], AGENT, approve)
    bot.gateway("INTERACTION_CREATE", _with(click, path, value))
    (kept,) = await wait_for(lambda: _async(bot.router.unreadable), what="the dead letter")
    assert (kept.platform, kept.kind) == ("discord", "click") and kept.reason
    assert bot.router.clicks == [] and loud(caplog) == []


async def test_a_click_on_a_message_whose_buttons_do_not_read_is_kept(
    bot: Bot, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces a click whose message carries a component discord.py cannot rebuild (a button
    of type `true`, a row in a row): its task for the buttons raised where nothing caught it,
    logged by asyncio at ERROR, and the click was lost."""
    thread_id = await bot.open_conversation()
    escalation = await post_escalation(bot.api, thread_id, "Refund $250.00?")
    click = bot.api.component_interaction(
        thread_id, escalation["id"], AGENT, custom_ids(escalation)[0]
    )
    bot.gateway("INTERACTION_CREATE", _with(click, "message.components.0.components.0.type", True))
    (kept,) = await wait_for(lambda: _async(bot.router.unreadable), what="the dead letter")
    assert kept.kind == "click" and "components" in kept.reason
    # After it, a click that reads: once it is routed, the one kept would have been as well.
    control = bot.api.component_interaction(
        thread_id, escalation["id"], AGENT, custom_ids(escalation)[0]
    )
    bot.gateway("INTERACTION_CREATE", control)
    await wait_for(lambda: _async(bool(bot.router.clicks)), what="the click that reads, routed")
    assert [c.event_id for c in bot.router.clicks] == [control["id"]]
    assert loud(caplog) == []


async def test_an_interaction_from_no_one_discord_py_can_name_is_kept(
    bot: Bot, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces an interaction with a `member` but no guild: discord.py reads `user` outside a
    guild, left it MISSING, and the handler raised on it with a traceback."""
    thread_id = await bot.open_conversation()
    escalation = await post_escalation(bot.api, thread_id, "Refund $250.00?")
    click = bot.api.component_interaction(
        thread_id, escalation["id"], AGENT, custom_ids(escalation)[0]
    )
    bot.gateway("INTERACTION_CREATE", _with(click, "guild_id", None))
    (kept,) = await wait_for(lambda: _async(bot.router.unreadable), what="the dead letter")
    assert kept.kind == "click" and bot.router.clicks == [] and loud(caplog) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("data.type", None),  # discord.py makes an AppCommandType of it
        ("data.type", 99),
        ("data.options", None),  # discord.py iterates them
        ("data.options.0.value", ["a list"]),
        ("data.options.0.value", 1),  # a string option holding a number: str methods raised
        ("data.guild_id", [1]),
        ("data.resolved", {"users": {"1": "not a user"}}),
    ],
)
async def test_a_command_that_does_not_fit_is_refused_at_the_edge_and_the_gateway_goes_on(
    bot: Bot, path: str, value: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces slash commands whose options discord.py cannot read raising in the command
    tree's own task (asyncio's ERROR and a traceback; the caller never answered). Refused before
    discord.py reads them: one line, no answer (Discord tells its caller it failed), nothing
    kept; the next command is answered."""
    payload = bot.api.command_interaction(
        "refund-status", SUPPORT, PRESENTER, {"conversation": "t1"}
    )
    bot.gateway("INTERACTION_CREATE", _with(payload, path, value))
    # After it, a command that is answered: by then the one refused would have been as well.
    control = await run_command(bot, "refund-hold", PRESENTER)
    assert control.startswith("Hold before refund")
    assert interaction(bot.api, payload).callbacks == []
    assert "a INTERACTION_CREATE event does not fit" in caplog.text
    assert bot.router.unreadable == [] and loud(caplog) == []


@pytest.mark.parametrize(
    "resolved",
    [
        {"users": {"1": {}}},  # fits the edge's shape; discord.py's User() raises KeyError
        {"users": {"1": {"id": "x"}}},
        {"channels": {"1": {}}},
    ],
)
async def test_a_command_discord_py_cannot_read_is_answered_in_one_line(
    bot: Bot, resolved: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces a slash command whose resolved users or channels discord.py cannot build
    raising in the command tree's own task, or in its error handler, which reads them again: a
    traceback, and the caller never answered."""
    payload = bot.api.command_interaction(
        "refund-status", SUPPORT, PRESENTER, {"conversation": "t1"}
    )
    bot.gateway("INTERACTION_CREATE", _with(payload, "data.resolved", resolved))
    record = await answered(bot.api, payload)
    assert record.callbacks[0]["data"]["content"] == UNREADABLE_COMMAND
    assert record.callbacks[0]["data"]["allowed_mentions"] == {"parse": []}
    assert "a slash command discord.py cannot read" in caplog.text and loud(caplog) == []


async def test_a_link_of_5000_digits_is_a_plain_answer(
    bot: Bot, temporal: StubTemporal, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces /refund-status conversation:https://discord.com/channels/<5,000 digits> raising
    ValueError out of int() (a traceback, and "failed on our side"), parsed before the role
    check."""
    link = f"https://discord.com/channels/{GUILD}/{'9' * 5000}"
    refused = await run_command(bot, "refund-status", STRANGER, options={"conversation": link})
    assert "needs the presenter or refund_approver role" in refused
    answer = await run_command(bot, "refund-status", PRESENTER, options={"conversation": link})
    assert "failed" not in answer and temporal.calls, answer
    assert loud(caplog) == []


async def test_a_click_delivered_twice_is_answered_once(
    bot: Bot, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces a click the gateway delivered again (a RESUME replays at will) answered a
    second time: Discord refuses (40060 already acknowledged), logged with a traceback."""
    thread_id = await bot.open_conversation()
    escalation = await post_escalation(bot.api, thread_id, "Refund $250.00?")
    click = bot.api.component_interaction(
        thread_id, escalation["id"], AGENT, custom_ids(escalation)[0]
    )
    bot.gateway("INTERACTION_CREATE", click)
    await wait_for(lambda: _async(bool(bot.router.clicks)), what="the click routed")
    bot.gateway("INTERACTION_CREATE", click)
    # After it, a click in another thread: once it is answered and routed, the redelivery would
    # have been.
    other = await bot.open_conversation("My kettle leaks")
    other_escalation = await post_escalation(bot.api, other, "Refund $40.00?")
    control = bot.api.component_interaction(
        other, other_escalation["id"], AGENT, custom_ids(other_escalation)[0]
    )
    bot.gateway("INTERACTION_CREATE", control)
    await answered(bot.api, control)
    await wait_for(lambda: _async(len(bot.router.clicks) >= 2), what="the other click routed")
    assert len(interaction(bot.api, click).callbacks) == 1
    assert [c.event_id for c in bot.router.clicks] == [click["id"], control["id"]]
    assert loud(caplog) == []


async def test_a_workflow_id_temporal_refuses_is_a_plain_answer(
    bot: Bot, temporal: StubTemporal, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces a typed Workflow ID Temporal refuses outright (INVALID_ARGUMENT: past its
    length limit) raised out of the command: a traceback, and "failed on our side"."""
    temporal.fail_with = RPCError(
        "WorkflowId length exceeds limit", RPCStatusCode.INVALID_ARGUMENT, b""
    )
    typed = "discord-" + "9" * 2000
    answer = await run_command(bot, "refund-release", PRESENTER, options={"conversation": typed})
    assert answer.startswith("No open conversation discord-999") and len(answer) < 200
    assert loud(caplog) == []


async def _allow(actor: Actor) -> bool:
    return True


async def _async(value: Any) -> Any:
    return value

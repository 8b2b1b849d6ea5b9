"""Discord's outbound half against a local fake of Discord's REST API (no Temporal, no network)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Literal

import aiohttp
import discord
import pytest
from discord.http import HTTPClient
from discord.state import ConnectionState
from pydantic import SecretStr
from temporalio.exceptions import ApplicationError

from agent.models import Actor, MessageEdit, MessageKey, OutboundMessage, ThreadRef
from bot.discord import render
from bot.discord.outbound import AUTH_ERROR, PERMANENT_ERROR, DiscordThreadPoster
from bot.discord.settings import DiscordSettings
from harness.fakes.discord_api import MESSAGES_ROUTE, FakeDiscordAPI

THREAD_ID = 1190000000000000042
WORKFLOW_ID = f"discord-1170000000000000007-{THREAD_ID}"


def outbound(
    text: str = "What is your order number?",
    *,
    seq: int = 1,
    actions: list[Literal["approve", "deny"]] | None = None,
    thread_id: int = THREAD_ID,
    round: int | None = None,
) -> OutboundMessage:
    return OutboundMessage(
        thread=ThreadRef(
            platform="discord",
            workspace="1170000000000000007",
            channel="1170000000000000009",
            thread=str(thread_id),
        ),
        key=MessageKey(workflow_id=WORKFLOW_ID, run_id="run-1", seq=seq),
        kind="escalation" if actions else "question",
        text=text,
        actions=actions or [],
        round=round,
    )


@pytest.fixture
async def api() -> AsyncIterator[FakeDiscordAPI]:
    async with FakeDiscordAPI() as fake:
        yield fake


@pytest.fixture
async def poster(api: FakeDiscordAPI) -> AsyncIterator[DiscordThreadPoster]:
    async with DiscordThreadPoster(SecretStr(api.token), api_url=api.api_url) as p:
        yield p


def posts(api: FakeDiscordAPI) -> list:
    return api.requests_to(MESSAGES_ROUTE)


# -- posting ----------------------------------------------------------------------------------


async def test_post_lands_in_thread_and_pings_nobody(
    api: FakeDiscordAPI, poster: DiscordThreadPoster
) -> None:
    text = "Customer wrote: @everyone <@123> refund me"
    posted = await poster.post(outbound(text))

    [stored] = api.messages(THREAD_ID)
    assert posted.platform_message_id == stored["id"]
    assert posted.duplicate is False
    assert stored["content"] == text
    assert stored["mention_everyone"] is False
    assert stored["mentions"] == []

    [request] = posts(api)
    assert request.path == f"/channels/{THREAD_ID}/messages"
    assert request.headers["Authorization"] == f"Bot {api.token}"
    assert request.json["allowed_mentions"] == {"parse": []}
    assert request.json["nonce"] == render.nonce_for(outbound().key)
    assert request.json["enforce_nonce"] is True
    assert "components" not in request.json
    # Logged in over REST once (static_login), no gateway.
    assert [r.route for r in api.requests] == ["GET /users/@me", MESSAGES_ROUTE]


async def test_fake_pings_when_allowed_mentions_is_absent(api: FakeDiscordAPI) -> None:
    # The control for the test above: without allowed_mentions the same text would ping.
    headers = {"Authorization": f"Bot {api.token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{api.api_url}/channels/{THREAD_ID}/messages",
            json={"content": "@everyone <@123>"},
            headers=headers,
        ) as response,
    ):
        assert response.status == 200
        message = await response.json()
    assert message["mention_everyone"] is True
    assert [u["id"] for u in message["mentions"]] == ["123"]


APPROVER_ROLE = "1170000000000000100"
REMINDER = "Reminder for the refund approvers: order 4500 ($450.00) has waited an hour."


def reminder(seq: int) -> OutboundMessage:
    return outbound(REMINDER, seq=seq).model_copy(update={"kind": "info", "mention": "approvers"})


async def test_the_approvers_reminder_pings_the_approver_role_and_only_it(
    api: FakeDiscordAPI,
) -> None:
    settings = DiscordSettings(
        _env_file=None,
        token=SecretStr(api.token),
        api_url=api.api_url,
        approver_role=APPROVER_ROLE,
    )
    quoted = "Customer wrote: @everyone <@123> <@&1170000000000000999> refund me"
    async with DiscordThreadPoster.from_settings(settings) as poster:
        await poster.post(outbound(quoted, seq=1))
        await poster.post(outbound("Needs a person.", seq=2, actions=["approve", "deny"]))
        await poster.post(reminder(3).model_copy(update={"text": f"{REMINDER} {quoted}"}))

    *others, reminded = api.messages(THREAD_ID)
    assert reminded["content"] == f"<@&{APPROVER_ROLE}> {REMINDER} {quoted}"
    # Discord pings the approver role, and nobody the customer's words name.
    assert reminded["mention_roles"] == [APPROVER_ROLE]
    assert reminded["mentions"] == [] and reminded["mention_everyone"] is False
    *_, request = posts(api)
    assert request.json["allowed_mentions"] == {"parse": [], "roles": [APPROVER_ROLE]}
    for message in others:
        assert not message["content"].startswith("<@&")
        assert message["mention_roles"] == [] and message["mentions"] == []
    assert [r.json["allowed_mentions"] for r in posts(api)[:-1]] == [{"parse": []}] * 2


async def test_an_approver_role_given_by_name_is_mentioned_by_its_id(
    api: FakeDiscordAPI, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduces the reminder naming a role given by name in bold: it mentioned nobody, and the
    approvers it was for were never notified."""
    guild, role_id, role = 1170000000000000007, "1170000000000000101", "Refund *Approvers*"
    api.add_guild(guild)
    api.add_role(guild, int(role_id), role)
    api.add_role(guild, 1170000000000000102, "Refund Approvers")  # another name: not it
    async with DiscordThreadPoster(
        SecretStr(api.token), api_url=api.api_url, approver_role=role
    ) as poster:
        await poster.post(outbound("Needs a person.", seq=1, actions=["approve", "deny"]))
        await poster.post(reminder(2))
    # A name no role of the guild has (renamed since, say): written in bold, pinging nobody.
    async with DiscordThreadPoster(
        SecretStr(api.token), api_url=api.api_url, approver_role="Refund *Deciders*"
    ) as poster:
        await poster.post(reminder(3))

    escalation, reminded, unmatched = api.messages(THREAD_ID)
    assert reminded["content"] == f"<@&{role_id}> {REMINDER}"
    assert reminded["mention_roles"] == [role_id] and reminded["mentions"] == []
    assert not escalation["content"].startswith("<@&") and escalation["mention_roles"] == []
    assert unmatched["content"] == f"**Refund \\*Deciders\\*** {REMINDER}"
    assert unmatched["mention_roles"] == []
    allowed = [r.json["allowed_mentions"] for r in posts(api)]
    assert allowed == [{"parse": []}, {"parse": [], "roles": [role_id]}, {"parse": []}]
    assert "has no role named 'Refund *Deciders*'" in caplog.text


async def test_without_an_approver_role_the_reminder_is_its_text(
    api: FakeDiscordAPI, poster: DiscordThreadPoster
) -> None:
    await poster.post(reminder(1))
    [stored] = api.messages(THREAD_ID)
    assert stored["content"] == REMINDER and stored["mention_roles"] == []


async def test_retried_post_returns_the_first_message(
    api: FakeDiscordAPI, poster: DiscordThreadPoster
) -> None:
    first = await poster.post(outbound())
    again = await poster.post(outbound())

    assert again.platform_message_id == first.platform_message_id
    assert again.duplicate is True
    assert len(api.messages(THREAD_ID)) == 1
    sent = posts(api)
    assert len(sent) == 2 and sent[0].json["nonce"] == sent[1].json["nonce"]


async def test_retry_from_another_worker_reports_duplicate(api: FakeDiscordAPI) -> None:
    async with DiscordThreadPoster(SecretStr(api.token), api_url=api.api_url) as crashed:
        first = await crashed.post(outbound())

    # A new process, whose attempt starts 30 s after the first one posted: no memory of the post,
    # only the enforced nonce and the message's creation time.
    def later() -> datetime:
        return datetime.now(UTC) + timedelta(seconds=30)

    async with DiscordThreadPoster(SecretStr(api.token), api_url=api.api_url, now=later) as fresh:
        again = await fresh.post(outbound())

    assert again.platform_message_id == first.platform_message_id
    assert again.duplicate is True
    assert len(api.messages(THREAD_ID)) == 1


async def test_different_keys_post_different_messages(
    api: FakeDiscordAPI, poster: DiscordThreadPoster
) -> None:
    one = await poster.post(outbound(seq=1))
    two = await poster.post(outbound(seq=2))
    assert one.platform_message_id != two.platform_message_id
    assert not one.duplicate and not two.duplicate
    assert len(api.messages(THREAD_ID)) == 2


async def test_nonce_is_only_remembered_for_a_few_minutes(
    api: FakeDiscordAPI, poster: DiscordThreadPoster
) -> None:
    # Why the Activity's retries must finish inside Discord's window: after it, a retry posts again.
    first = await poster.post(outbound())
    api.advance(api.nonce_window + 1)
    late = await poster.post(outbound())
    assert late.platform_message_id != first.platform_message_id
    assert len(api.messages(THREAD_ID)) == 2


async def test_escalation_carries_approve_and_deny_buttons_of_its_round(
    api: FakeDiscordAPI, poster: DiscordThreadPoster
) -> None:
    await poster.post(outbound("Refund $120 for order 1042?", actions=["approve", "deny"], round=3))

    [stored] = api.messages(THREAD_ID)
    [row] = stored["components"]
    assert row["type"] == discord.ComponentType.action_row.value
    buttons = row["components"]
    assert [b["custom_id"] for b in buttons] == [
        f"refund:approve:r3:{WORKFLOW_ID}",
        f"refund:deny:r3:{WORKFLOW_ID}",
    ]
    assert [b["style"] for b in buttons] == [
        discord.ButtonStyle.success.value,
        discord.ButtonStyle.danger.value,
    ]
    assert [render.parse_custom_id(b["custom_id"]) for b in buttons] == [
        ("approve", WORKFLOW_ID, 3),
        ("deny", WORKFLOW_ID, 3),
    ]


def test_buttons_from_before_rounds_still_parse_and_match_the_template() -> None:
    # Posted before escalation rounds existed: no round in the custom id. They still match the
    # persistent DynamicItem's template (discord.py's fullmatch) and read as round None.
    old = f"refund:approve:{WORKFLOW_ID}"
    assert render.custom_id_for("approve", WORKFLOW_ID) == old
    match = re.compile(render.CUSTOM_ID_TEMPLATE).fullmatch(old)
    assert match is not None and match["round"] is None
    assert render.parse_custom_id(old) == ("approve", WORKFLOW_ID, None)


async def test_edit_replaces_the_escalation_and_its_buttons_with_what_happened(
    api: FakeDiscordAPI, poster: DiscordThreadPoster
) -> None:
    escalation = outbound("Refund $450 for order 4500?", actions=["approve", "deny"], round=1)
    posted = await poster.post(escalation)
    edit = MessageEdit(
        thread=escalation.thread,
        key=escalation.key,
        platform_message_id=posted.platform_message_id,
        text=escalation.text,
        outcome="refund issued ($450.00, reference re_1).",
        decision="approve",
        # A name its holder chose: named by their mention, it cannot format, link or ping.
        decided_by=Actor(
            platform="discord", user_id="81", display_name="**Sam** [click](https://evil) @everyone"
        ),
    )
    await poster.edit(edit)
    await poster.edit(edit)  # a retried Activity: the same message again

    [stored] = api.messages(THREAD_ID)
    assert stored["content"] == (
        "Refund $450 for order 4500?\n\nApproved by <@81>: refund issued ($450.00, reference re_1)."
    )
    assert stored["components"] == []
    assert stored["mention_everyone"] is False and stored["mentions"] == []  # it never pings
    edits = api.requests_to("PATCH /channels/{channel_id}/messages/{message_id}")
    assert [e.json["allowed_mentions"] for e in edits] == [{"parse": []}] * 2
    assert len(edits) == 2 and len(api.messages(THREAD_ID)) == 1


async def test_editing_a_deleted_message_is_not_retryable(
    api: FakeDiscordAPI, poster: DiscordThreadPoster
) -> None:
    escalation = outbound("Approve?", actions=["approve", "deny"], round=1)
    await poster.post(escalation)
    edit = MessageEdit(
        thread=escalation.thread,
        key=escalation.key,
        platform_message_id="1190000000000009999",  # no such message
        text="Approve?",
        outcome="no decision was made in time, so this request is closed.",
    )
    with pytest.raises(ApplicationError) as caught:
        await poster.edit(edit)
    assert caught.value.type == PERMANENT_ERROR and caught.value.non_retryable


async def test_rate_limit_is_waited_out_and_posts_once(
    api: FakeDiscordAPI, poster: DiscordThreadPoster
) -> None:
    retry_after = 0.5
    api.rate_limit(MESSAGES_ROUTE, times=1, retry_after=retry_after)

    started = time.monotonic()
    posted = await poster.post(outbound())
    elapsed = time.monotonic() - started

    assert elapsed >= retry_after
    assert [r.status for r in posts(api)] == [429, 200]
    [stored] = api.messages(THREAD_ID)
    assert stored["id"] == posted.platform_message_id


async def test_oversized_content_is_cut_to_discords_limit(
    api: FakeDiscordAPI, poster: DiscordThreadPoster
) -> None:
    await poster.post(outbound("x" * 5000))
    [stored] = api.messages(THREAD_ID)
    assert len(stored["content"]) == render.MAX_CONTENT
    assert stored["content"].endswith(render.ELLIPSIS)


@pytest.mark.parametrize("status", [403, 404])
async def test_forbidden_or_missing_thread_is_not_retryable(
    api: FakeDiscordAPI, poster: DiscordThreadPoster, status: int
) -> None:
    api.fail_channel(THREAD_ID, status)

    with pytest.raises(ApplicationError) as caught:
        await poster.post(outbound())

    error = caught.value
    assert error.type == PERMANENT_ERROR
    assert error.non_retryable is True
    assert str(THREAD_ID) in str(error)
    assert api.token not in str(error)
    assert api.messages(THREAD_ID) == []


async def test_rejected_token_is_a_retryable_auth_error(api: FakeDiscordAPI) -> None:
    async with DiscordThreadPoster(SecretStr("wrong-token"), api_url=api.api_url) as poster:
        with pytest.raises(ApplicationError) as caught:
            await poster.post(outbound())

    assert caught.value.type == AUTH_ERROR
    assert caught.value.non_retryable is False
    assert "wrong-token" not in str(caught.value)
    assert posts(api) == []


async def test_server_error_propagates_for_temporal_to_retry(
    api: FakeDiscordAPI, poster: DiscordThreadPoster
) -> None:
    await poster.post(outbound(seq=1))  # logged in
    await api.__aexit__(None, None, None)  # Discord unreachable

    with pytest.raises((aiohttp.ClientError, OSError)) as caught:
        await poster.post(outbound(seq=2))
    assert not isinstance(caught.value, ApplicationError)


async def test_fake_messages_parse_as_discord_py_messages(
    api: FakeDiscordAPI, poster: DiscordThreadPoster
) -> None:
    # The fake's message objects are shaped as Discord's: discord.py's own model accepts them.
    await poster.post(outbound("Approve?", actions=["approve", "deny"]))
    [data] = api.messages(THREAD_ID)
    state = ConnectionState(
        dispatch=lambda *_: None,
        handlers={},
        hooks={},
        http=HTTPClient(asyncio.get_running_loop()),
        intents=discord.Intents.none(),
    )
    channel = discord.PartialMessageable(state=state, id=THREAD_ID)
    # The fake's JSON object, where discord.py's MessagePayload TypedDict is declared.
    message = discord.Message(state=state, channel=channel, data=data)  # type: ignore[arg-type]

    assert message.id == int(data["id"])
    assert message.author.bot is True
    assert message.nonce == render.nonce_for(outbound().key)
    [row] = message.components
    assert isinstance(row, discord.ActionRow)
    assert [b.custom_id for b in row.children] == [
        f"refund:approve:{WORKFLOW_ID}",
        f"refund:deny:{WORKFLOW_ID}",
    ]


# -- rendering --------------------------------------------------------------------------------


def test_nonce_is_deterministic_short_and_distinct() -> None:
    a = MessageKey(workflow_id=WORKFLOW_ID, run_id="run-1", seq=1)
    b = MessageKey(workflow_id=WORKFLOW_ID, run_id="run-1", seq=2)
    assert render.nonce_for(a) == render.nonce_for(a)
    assert render.nonce_for(a) != render.nonce_for(b)
    assert len(render.nonce_for(a)) == render.MAX_NONCE


def test_custom_id_must_fit_discords_limit() -> None:
    longest = "w" * (render.MAX_CUSTOM_ID - len("refund:approve:"))
    assert len(render.custom_id_for("approve", longest)) == render.MAX_CUSTOM_ID
    with pytest.raises(ValueError, match="too long"):
        render.custom_id_for("approve", longest + "w")
    with pytest.raises(ValueError):
        render.payload_for(outbound(actions=["deny"]).model_copy(update={"key": _long_key()}))


def _long_key() -> MessageKey:
    return MessageKey(workflow_id="w" * 90, run_id="r", seq=1)


@pytest.mark.parametrize(
    "custom_id",
    ["refund:refund:x", "refund:approve:", "other:approve:x", "refund:approve:a b", "x" * 101],
)
def test_foreign_custom_ids_are_not_parsed(custom_id: str) -> None:
    assert render.parse_custom_id(custom_id) is None


def test_template_matches_the_way_discord_py_dispatches() -> None:
    # discord.py's DynamicItem dispatch uses fullmatch on the compiled template.
    custom_id = render.custom_id_for("deny", "wf-1", 12)
    match = re.compile(render.CUSTOM_ID_TEMPLATE).fullmatch(custom_id)
    assert match is not None
    assert (match["action"], match["round"], match["workflow_id"]) == ("deny", "12", "wf-1")


def test_a_round_that_makes_the_custom_id_too_long_is_refused() -> None:
    longest = "w" * (render.MAX_CUSTOM_ID - len("refund:approve:r999999999:"))
    assert len(render.custom_id_for("approve", longest, 999_999_999)) == render.MAX_CUSTOM_ID
    with pytest.raises(ValueError, match="too long"):
        render.custom_id_for("approve", longest + "w", 999_999_999)


def test_cut_counts_utf16_so_astral_text_still_fits() -> None:
    cut = render.fit_content("🙂" * 1500)  # 3000 UTF-16 code units
    assert len(cut.encode("utf-16-le")) // 2 <= render.MAX_CONTENT
    assert cut.endswith(render.ELLIPSIS)
    assert render.fit_content("short") == "short"


# -- settings ---------------------------------------------------------------------------------


def test_blank_settings_mean_discord_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISCORD_TOKEN", "")
    monkeypatch.setenv("DISCORD_GUILD_ID", "")
    settings = DiscordSettings(_env_file=None)
    assert settings.enabled is False
    assert settings.guild_id is None
    with pytest.raises(ValueError):
        DiscordThreadPoster.from_settings(settings)


def test_settings_build_a_poster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISCORD_TOKEN", "t0ken")
    monkeypatch.setenv("DISCORD_API_URL", "http://127.0.0.1:9/api/v10/")
    settings = DiscordSettings(_env_file=None)
    assert settings.enabled is True
    assert settings.api_url == "http://127.0.0.1:9/api/v10"
    assert "t0ken" not in repr(settings)
    assert isinstance(DiscordThreadPoster.from_settings(settings), DiscordThreadPoster)

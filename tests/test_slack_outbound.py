"""The Slack outbound half against a local Slack Web API fake, over real HTTP with slack_sdk."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import aiohttp
import pytest
from pydantic import SecretStr
from slack_sdk.web.async_client import AsyncWebClient
from temporalio.exceptions import ApplicationError

from agent.models import Actor, MessageEdit, MessageKey, OutboundMessage, ThreadRef
from bot.slack.outbound import SlackThreadPoster
from bot.slack.render import (
    APPROVE_ACTION_ID,
    DECISION_BLOCK_ID,
    DENY_ACTION_ID,
    METADATA_EVENT_TYPE,
    SECTION_TEXT_LIMIT,
    blocks_for,
    escape,
    fallback_text,
    mention_for,
    parse_button_value,
)
from bot.slack.settings import SlackSettings
from harness.conditions import wait_for
from harness.fakes.slack_api import FakeSlackApi

CHANNEL = "C0SUPPORT"
CUSTOMER_TEXT = "<!channel> hi @here & <@U0BOSS>"


@pytest.fixture
async def slack(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeSlackApi]:
    # slack_sdk picks proxies up from the environment; the fake is on loopback.
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with FakeSlackApi() as fake:
        yield fake


@pytest.fixture
async def poster(slack: FakeSlackApi) -> AsyncIterator[SlackThreadPoster]:
    async with SlackThreadPoster(slack.token, slack.url) as poster:
        yield poster


def outbound(
    root_ts: str,
    *,
    seq: int = 1,
    text: str = "Which order is this about?",
    kind: str = "question",
    actions: list[str] | None = None,
    channel: str = CHANNEL,
) -> OutboundMessage:
    workflow_id = f"slack-T0FAKE-{channel}-{root_ts}"
    return OutboundMessage.model_validate(
        {
            "thread": ThreadRef(
                platform="slack", workspace="T0FAKE", channel=channel, thread=root_ts
            ),
            "key": MessageKey(workflow_id=workflow_id, run_id="run-1", seq=seq),
            "kind": kind,
            "text": text,
            "actions": actions or [],
        }
    )


def bot_replies(slack: FakeSlackApi, root_ts: str) -> list[dict]:
    return [m for m in slack.thread(CHANNEL, root_ts) if m.get("bot_id")]


async def test_post_lands_in_the_thread_with_its_key_and_cannot_ping(
    slack: FakeSlackApi, poster: SlackThreadPoster
) -> None:
    root = slack.add_message(CHANNEL, CUSTOMER_TEXT)
    message = outbound(root, kind="info", text=f"You wrote: {CUSTOMER_TEXT}")

    posted = await poster.post(message)

    assert posted.duplicate is False
    (call,) = slack.calls_to("chat.postMessage")
    assert call.params["channel"] == CHANNEL
    assert call.params["thread_ts"] == root
    assert call.params["metadata"]["event_type"] == METADATA_EVENT_TYPE
    assert call.params["metadata"]["event_payload"]["key"] == str(message.key)
    assert not call.params.get("link_names")
    assert call.params["unfurl_links"] is False and call.params["unfurl_media"] is False
    section_text = call.params["blocks"][0]["text"]["text"]
    for rendered in (call.params["text"], section_text):
        assert "&lt;!channel&gt;" in rendered and "&lt;@U0BOSS&gt;" in rendered
        assert "<" not in rendered and ">" not in rendered  # no mention syntax survives

    # The dedup read happened first, on the thread, asking for metadata.
    (read,) = slack.calls_to("conversations.replies")
    assert read.http_method == "GET"
    assert read.params["ts"] == root and read.params["include_all_metadata"] == "1"
    assert slack.calls.index(read) < slack.calls.index(call)

    root_msg, reply = slack.thread(CHANNEL, root)
    assert root_msg["ts"] == root and root_msg["reply_count"] == 1
    assert reply["ts"] == posted.platform_message_id
    assert reply["thread_ts"] == root


async def test_same_key_posts_once_and_returns_the_earlier_post(
    slack: FakeSlackApi, poster: SlackThreadPoster
) -> None:
    root = slack.add_message(CHANNEL, "my mug arrived broken")
    first = await poster.post(outbound(root, seq=1))

    retried = await poster.post(outbound(root, seq=1))  # a retried Activity attempt
    assert retried.duplicate is True
    assert retried.platform_message_id == first.platform_message_id
    assert len(slack.calls_to("chat.postMessage")) == 1

    nxt = await poster.post(outbound(root, seq=2, text="Thanks, looking it up."))
    assert nxt.duplicate is False
    assert len(slack.calls_to("chat.postMessage")) == 2
    assert len(bot_replies(slack, root)) == 2


async def test_dedup_follows_the_reply_cursor(
    slack: FakeSlackApi, poster: SlackThreadPoster
) -> None:
    root = slack.add_message(CHANNEL, "refund please")
    for i in range(250):  # more than one page of replies before ours
        slack.add_message(CHANNEL, f"reply {i}", thread_ts=root)
    first = await poster.post(outbound(root, seq=7))
    reads_before = len(slack.calls_to("conversations.replies"))

    retried = await poster.post(outbound(root, seq=7))

    assert retried.duplicate is True and retried.platform_message_id == first.platform_message_id
    reads = slack.calls_to("conversations.replies")[reads_before:]
    assert len(reads) == 2 and "cursor" not in reads[0].params and reads[1].params["cursor"]
    assert len(slack.calls_to("chat.postMessage")) == 1


async def test_escalation_renders_approve_and_deny_with_the_workflow_id(
    slack: FakeSlackApi, poster: SlackThreadPoster
) -> None:
    root = slack.add_message(CHANNEL, "refund my $400 order")
    message = outbound(
        root, kind="escalation", text="Needs a human: $400.", actions=["approve", "deny"]
    )

    await poster.post(message)

    (reply,) = bot_replies(slack, root)
    actions = [b for b in reply["blocks"] if b["type"] == "actions"]
    assert len(actions) == 1 and actions[0]["block_id"] == DECISION_BLOCK_ID
    buttons = {e["action_id"]: e for e in actions[0]["elements"]}
    assert buttons.keys() == {APPROVE_ACTION_ID, DENY_ACTION_ID}
    assert buttons[APPROVE_ACTION_ID]["style"] == "primary"
    assert buttons[DENY_ACTION_ID]["style"] == "danger"
    assert {b["value"] for b in buttons.values()} == {message.key.workflow_id}
    assert blocks_for(message) == reply["blocks"]  # stable: a retry renders the same blocks


async def test_escalation_buttons_carry_their_round(
    slack: FakeSlackApi, poster: SlackThreadPoster
) -> None:
    root = slack.add_message(CHANNEL, "refund my $400 order")
    message = outbound(root, kind="escalation", text="Needs a human.", actions=["approve", "deny"])
    await poster.post(message.model_copy(update={"round": 2}))
    (reply,) = bot_replies(slack, root)
    (actions,) = [b for b in reply["blocks"] if b["type"] == "actions"]
    values = {e["value"] for e in actions["elements"]}
    assert values == {f"{message.key.workflow_id}#2"}
    assert parse_button_value(values.pop()) == (message.key.workflow_id, 2)
    assert parse_button_value(message.key.workflow_id) == (message.key.workflow_id, None)


async def test_edit_replaces_the_escalation_and_keeps_its_key(
    slack: FakeSlackApi, poster: SlackThreadPoster
) -> None:
    root = slack.add_message(CHANNEL, "refund my $400 order")
    message = outbound(
        root, kind="escalation", text="Needs a human: <$400>.", actions=["approve", "deny"]
    )
    posted = await poster.post(message)
    edit = MessageEdit(
        thread=message.thread,
        key=message.key,
        platform_message_id=posted.platform_message_id,
        text=message.text,
        outcome="not counted (Eve <eve@x> holds no live refund_approver grant).",
        decision="approve",
        decided_by=Actor(platform="slack", user_id="U0EVE", display_name="eve"),
    )
    await poster.edit(edit)
    await poster.edit(edit)  # a retried Activity: the same message again

    (reply,) = bot_replies(slack, root)
    assert [b["type"] for b in reply["blocks"]] == ["section", "context"]
    assert reply["blocks"][0]["text"]["text"] == escape(message.text)
    context = reply["blocks"][1]
    assert context["block_id"] == DECISION_BLOCK_ID
    assert context["elements"][0]["text"] == (
        "Approved by <@U0EVE>: not counted (Eve &lt;eve@x&gt; holds no live refund_approver grant)."
    )
    # The edit kept the post's metadata, so a late retry of the post still finds it.
    assert await poster.find_posted(CHANNEL, root, str(message.key)) == posted.platform_message_id
    assert len(slack.calls_to("chat.update")) == 2


async def test_editing_a_deleted_message_is_not_retryable(
    slack: FakeSlackApi, poster: SlackThreadPoster
) -> None:
    root = slack.add_message(CHANNEL, "refund my $400 order")
    message = outbound(root, kind="escalation", text="Needs a human.", actions=["approve"])
    edit = MessageEdit(
        thread=message.thread,
        key=message.key,
        platform_message_id="1111111111.000100",  # no such message
        text=message.text,
        outcome="no decision was made in time, so this request is closed.",
    )
    with pytest.raises(ApplicationError) as caught:
        await poster.edit(edit)
    assert caught.value.non_retryable and "message_not_found" in str(caught.value)


async def test_rate_limited_post_waits_retry_after_and_lands_once(
    slack: FakeSlackApi, poster: SlackThreadPoster
) -> None:
    root = slack.add_message(CHANNEL, "where is my refund")
    slack.rate_limit("chat.postMessage", times=1, retry_after=1)

    posted = await poster.post(outbound(root))

    calls = slack.calls_to("chat.postMessage")
    assert [c.status for c in calls] == [429, 200]
    # Timestamps come from time.monotonic() in the fake as each request arrived.
    assert calls[1].at - calls[0].at >= 1.0
    (reply,) = bot_replies(slack, root)
    assert reply["ts"] == posted.platform_message_id and posted.duplicate is False


async def test_long_retry_after_is_handed_to_temporal(
    slack: FakeSlackApi, poster: SlackThreadPoster
) -> None:
    root = slack.add_message(CHANNEL, "hello")
    slack.rate_limit("conversations.replies", times=1, retry_after=120)

    with pytest.raises(ApplicationError) as caught:
        await poster.post(outbound(root))

    assert caught.value.type == "SlackRateLimited" and not caught.value.non_retryable
    assert caught.value.next_retry_delay == timedelta(seconds=120)
    assert len(slack.calls_to("conversations.replies")) == 1  # no in-process wait
    assert slack.calls_to("chat.postMessage") == []


@pytest.mark.parametrize(
    ("fake_kwargs", "channel", "error"),
    [
        ({"unknown_channels": ["C0GONE"]}, "C0GONE", "channel_not_found"),
        ({"channels_without_bot": ["C0PRIVATE"]}, "C0PRIVATE", "not_in_channel"),
        ({"token": "xoxb-the-real-one"}, CHANNEL, "invalid_auth"),
    ],
)
async def test_permanent_errors_are_non_retryable(
    monkeypatch: pytest.MonkeyPatch, fake_kwargs: dict, channel: str, error: str
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    token = "xoxb-wrong-token-shh"
    async with FakeSlackApi(**{"token": token, **fake_kwargs}) as slack:
        root = slack.add_message(channel, "hi")
        async with SlackThreadPoster(token, slack.url) as poster:
            with pytest.raises(ApplicationError) as caught:
                await poster.post(outbound(root, channel=channel))

    assert caught.value.type == "SlackPermanentError" and caught.value.non_retryable
    assert error in str(caught.value)
    assert token not in str(caught.value) and token not in str(caught.value.__cause__)
    assert slack.calls_to("chat.postMessage") == []


async def test_permanent_error_on_the_post_itself(
    slack: FakeSlackApi, poster: SlackThreadPoster
) -> None:
    root = slack.add_message(CHANNEL, "hi")
    slack.fail("chat.postMessage", "is_archived")

    with pytest.raises(ApplicationError) as caught:
        await poster.post(outbound(root))

    assert caught.value.non_retryable and "is_archived" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "error"), [(200, "internal_error"), (503, "service_unavailable")]
)
async def test_transient_errors_stay_retryable(
    slack: FakeSlackApi, poster: SlackThreadPoster, status: int, error: str
) -> None:
    root = slack.add_message(CHANNEL, "hi")
    slack.fail("chat.postMessage", error, status=status)

    with pytest.raises(ApplicationError) as caught:
        await poster.post(outbound(root))
    assert caught.value.type == "SlackTransientError" and not caught.value.non_retryable

    # Temporal's next attempt re-reads the thread, finds nothing, and posts once.
    posted = await poster.post(outbound(root))
    assert posted.duplicate is False
    assert len(bot_replies(slack, root)) == 1


async def test_network_errors_propagate_for_temporal_to_retry(slack: FakeSlackApi) -> None:
    url = slack.url
    await slack.stop()
    async with SlackThreadPoster(slack.token, url) as poster:
        with pytest.raises(aiohttp.ClientError):
            await poster.post(outbound("1732860000.000100"))


async def test_posts_share_one_kept_alive_connection_until_closed(slack: FakeSlackApi) -> None:
    roots = [slack.add_message(CHANNEL, f"refund order {n}") for n in (1, 2, 3)]
    poster = SlackThreadPoster(slack.token, slack.url)
    posted = [await poster.post(outbound(root)) for root in roots]
    first = outbound(roots[0])
    await poster.edit(
        MessageEdit(
            thread=first.thread,
            key=first.key,
            platform_message_id=posted[0].platform_message_id,
            text=first.text,
            outcome="answered",
        )
    )

    # Three reads for an earlier attempt, three posts, one edit: one connection, still open.
    assert len(slack.calls) == 7
    assert len({call.connection for call in slack.calls}) == 1
    assert slack.open_connections() == 1

    await poster.close()

    async def closed() -> bool:
        return slack.open_connections() == 0

    await wait_for(closed, timeout=5, what="the poster's connection to close")
    # A post after close() (a late Activity as the Worker stops) still lands, on its own session.
    late = slack.add_message(CHANNEL, "refund order 4")
    assert (await poster.post(outbound(late))).duplicate is False
    assert len(bot_replies(slack, late)) == 1


async def test_never_posts_outside_a_thread(slack: FakeSlackApi, poster: SlackThreadPoster) -> None:
    with pytest.raises(ApplicationError) as caught:
        await poster.post(outbound(""))
    assert caught.value.non_retryable
    assert slack.calls == []


async def test_from_settings(slack: FakeSlackApi) -> None:
    settings = SlackSettings(
        _env_file=None, bot_token=SecretStr(slack.token), api_url=slack.url.rstrip("/")
    )
    assert settings.enabled and settings.api_url == slack.url
    root = slack.add_message(CHANNEL, "hi")

    async with SlackThreadPoster.from_settings(settings) as poster:
        posted = await poster.post(outbound(root))

    assert posted.platform_message_id == bot_replies(slack, root)[0]["ts"]
    with pytest.raises(ValueError, match="SLACK_BOT_TOKEN"):
        SlackThreadPoster.from_settings(SlackSettings(_env_file=None, bot_token=None))


async def test_the_approvers_reminder_mentions_their_user_group_and_nothing_else_does(
    slack: FakeSlackApi,
) -> None:
    settings = SlackSettings(
        _env_file=None,
        bot_token=SecretStr(slack.token),
        api_url=slack.url,
        approver_group="S0APPROVERS",
    )
    root = slack.add_message(CHANNEL, "refund order 4500 <!subteam^S0OTHER>")
    reminder = "Reminder for the refund approvers: order 4500 ($450.00) has waited an hour."
    async with SlackThreadPoster.from_settings(settings) as poster:
        await poster.post(outbound(root, seq=1, kind="escalation", actions=["approve", "deny"]))
        await poster.post(outbound(root, seq=2, kind="info", text=f"You wrote: {CUSTOMER_TEXT}"))
        await poster.post(
            outbound(root, seq=3, kind="info", text=reminder).model_copy(
                update={"mention": "approvers"}
            )
        )

    *others, reminded = slack.calls_to("chat.postMessage")
    mention = "<!subteam^S0APPROVERS> "
    assert reminded.params["text"] == mention + reminder  # the notification names the group
    assert reminded.params["blocks"][0]["text"]["text"] == mention + reminder
    assert len(others) == 2
    for call in others:
        for rendered in (call.params["text"], call.params["blocks"][0]["text"]["text"]):
            assert "<!" not in rendered and "subteam" not in rendered
    assert [m["text"] for m in bot_replies(slack, root)][-1] == mention + reminder


@pytest.mark.parametrize("group", [None, "", "S0X> <!channel", "sales-team"])
def test_without_a_user_group_id_the_reminder_mentions_nobody(group: str | None) -> None:
    message = outbound("1.000001", kind="info", text="Reminder for the refund approvers: …")
    message = message.model_copy(update={"mention": "approvers"})
    assert mention_for(message, group) == ""
    assert fallback_text(message, group) == message.text
    assert blocks_for(message, group)[0]["text"]["text"] == message.text


def test_settings_blank_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "")
    monkeypatch.setenv("SLACK_API_URL", "")
    settings = SlackSettings(_env_file=None)
    assert not settings.enabled and settings.api_url == "https://slack.com/api/"
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-secret-value")
    settings = SlackSettings(_env_file=None)
    assert "xoxb-secret-value" not in repr(settings)


def test_escape_and_long_text_rendering() -> None:
    assert escape("a & <b> &amp;") == "a &amp; &lt;b&gt; &amp;amp;"
    message = outbound("1.000001", text="<" * 1000 + "x" * 3000)  # escapes to 7000 characters
    sections = [b for b in blocks_for(message) if b["type"] == "section"]
    assert len(sections) == 3
    assert all(len(s["text"]["text"]) <= SECTION_TEXT_LIMIT for s in sections)
    assert "".join(s["text"]["text"] for s in sections) == escape(message.text)
    assert all(s["text"]["verbatim"] is True for s in sections)
    assert len(fallback_text(message)) <= 4000


async def test_fake_reads_form_and_json_bodies_and_checks_the_token(slack: FakeSlackApi) -> None:
    client = AsyncWebClient(token=slack.token, base_url=slack.url)
    assert (await client.auth_test())["user_id"] == slack.bot_user_id
    root = slack.add_message(CHANNEL, "hi")

    # Form-encoded body (the SDK's `data=`), JSON-valued argument sent as a string.
    await client.api_call(
        "chat.postMessage",
        data={"channel": CHANNEL, "thread_ts": root, "text": "form", "blocks": "[]"},
    )
    await client.chat_postEphemeral(channel=CHANNEL, user="U0CUSTOMER", text="only you")
    posts = slack.calls_to("chat.postMessage")
    assert posts[0].content_type == "application/x-www-form-urlencoded"
    assert posts[0].params["blocks"] == []
    assert slack.calls_to("chat.postEphemeral")[0].content_type == "application/json"
    assert [e["text"] for e in slack.ephemerals] == ["only you"]
    assert len(slack.thread(CHANNEL, root)) == 2  # ephemeral messages are not history

    async with aiohttp.ClientSession() as http:
        async with http.post(slack.url + "auth.test") as resp:
            assert (await resp.json()) == {"ok": False, "error": "not_authed"}
        headers = {"Authorization": "Bearer xoxb-nope"}
        async with http.post(slack.url + "auth.test", headers=headers) as resp:
            assert (await resp.json()) == {"ok": False, "error": "invalid_auth"}

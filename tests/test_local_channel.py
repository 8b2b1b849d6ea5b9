"""The terminal support channel's own behaviour: thread names, switching, people, plain text.

Real SQLite thread stores; the router and the commands are recording fakes where the behaviour
under test never reaches them (the end-to-end terminal runs in tests/test_terminal_channel.py).
"""

from __future__ import annotations

import io
from pathlib import Path

import aiosqlite

from agent.models import Mention, MessageKey, OutboundMessage
from agent.stores.sqlite import SqliteDatabase
from bot.conversations import Routed
from bot.local.markup import plain
from bot.local.terminal import PEOPLE, LocalChannel, inbound, thread_ref
from bot.local.thread_store import APPROVERS_MENTION, LocalThreadStore
from harness.recording_router import RecordingRouter
from tests.support.customer_text import ANSWERS_LINE, hostile_status
from tests.support.slack_app import RecordingCommands


def channel_on(
    tmp_path: Path, routed: Routed | None = None
) -> tuple[LocalChannel, io.StringIO, RecordingCommands]:
    out, commands, router = (
        io.StringIO(),
        RecordingCommands(),
        RecordingRouter(message_result=routed),
    )
    threads = LocalThreadStore(SqliteDatabase(tmp_path))
    return LocalChannel(threads, router, commands, out=out), out, commands


async def test_threads_are_named_1_2_3_in_the_order_they_open(tmp_path: Path) -> None:
    threads = LocalThreadStore(SqliteDatabase(tmp_path))
    first = await threads.open_thread("support", "customer", "please refund order 1234")
    await threads.add_reply(first.thread_id, "customer", "Yes")
    await threads.add_reply(first.thread_id, "customer", "Split seam")
    second = await threads.open_thread("support", "marlow", "refund 7777")
    third = await threads.open_thread("support", "customer", "refund 4500")
    assert [first.thread_id, second.thread_id, third.thread_id] == ["t1", "t2", "t3"]
    assert [m.kind for m in (first, second, third)] == ["customer"] * 3
    listed = await threads.threads()
    assert [(t.thread_id, t.opened_by, t.opening_text) for t in listed] == [
        ("t1", "customer", "please refund order 1234"),
        ("t2", "marlow", "refund 7777"),
        ("t3", "customer", "refund 4500"),
    ]


async def test_threads_named_the_old_way_keep_their_names(tmp_path: Path) -> None:
    path = tmp_path / "threads.sqlite"
    threads = LocalThreadStore(SqliteDatabase(tmp_path))
    await threads.messages()  # creates the schema
    # The earlier scheme: a thread was named t<seq of its root message>, so t1 and t4.
    async with aiosqlite.connect(path) as db:
        rows = (
            (1, "t1", "customer"),
            (2, "t1", "reply"),
            (3, "t1", "reply"),
            (4, "t4", "customer"),
        )
        for seq, thread, kind in rows:
            await db.execute(
                "INSERT INTO messages (seq, thread_id, author, author_is_bot, kind, text, "
                "created_at) VALUES (?, ?, 'customer', 0, ?, 'x', '2025-01-01')",
                (seq, thread, kind),
            )
        for thread in ("t1", "t4"):
            await db.execute(
                "INSERT INTO threads VALUES (?, 'support', 'customer', '2025-01-01')", (thread,)
            )
        await db.commit()
    fresh = await threads.open_thread("support", "customer", "refund 4500")
    assert fresh.thread_id == "t5"  # after the highest name in use: no name given twice
    assert fresh.seq == 5 and inbound(fresh, PEOPLE["customer"]).opens_thread
    reply = await threads.add_reply("t4", "customer", "Yes")
    assert not inbound(reply, PEOPLE["customer"]).opens_thread
    assert [t.thread_id for t in await threads.threads()] == ["t1", "t4", "t5"]


async def test_switching_to_a_thread_that_does_not_exist_says_so(tmp_path: Path) -> None:
    channel, out, _ = channel_on(tmp_path)
    await channel.handle("please refund order 1234")  # opens t1
    await channel.handle("/new")
    await channel.handle("/thread t99")
    assert channel.thread is None
    assert "! no thread t99; /threads lists them" in out.getvalue()
    await channel.handle("/thread t1")
    assert channel.thread == "t1" and "In thread t1." in out.getvalue()


async def test_grant_and_revoke_refuse_someone_who_is_not_here(tmp_path: Path) -> None:
    channel, out, commands = channel_on(tmp_path)
    channel.me = PEOPLE["presenter"]
    await channel.handle("/refund-grant @nobody refund_approver 500")
    await channel.handle("/refund-revoke @nobody refund_approver")
    assert commands.calls == []
    assert out.getvalue().count("! no one here is called @nobody: one of @customer") == 2
    await channel.handle("/refund-grant @Marlow refund_approver 500")
    ((name, (by, target, role, limit)),) = commands.calls
    assert (name, by, target, role, limit) == (
        "refund_grant",
        PEOPLE["presenter"],
        PEOPLE["marlow"],
        "refund_approver",
        "500",
    )


async def test_the_queue_answers_whoever_asks_privately(tmp_path: Path) -> None:
    channel, out, commands = channel_on(tmp_path)
    channel.me = PEOPLE["support"]
    await channel.handle("/refund-queue")
    assert commands.calls == [("refund_queue", (PEOPLE["support"],))]
    assert "(only you can see this) refund_queue done" in out.getvalue()


async def test_takeover_and_handback_act_on_the_thread_named_or_the_current_one(
    tmp_path: Path,
) -> None:
    channel, out, commands = channel_on(tmp_path)
    channel.me = PEOPLE["support"]
    await channel.handle("/refund-takeover")
    await channel.handle("/refund-handback")
    assert commands.calls == []  # outside any thread, and none named
    assert "! which thread? /refund-takeover t1" in out.getvalue()
    assert "! which thread? /refund-handback t1" in out.getvalue()

    await channel.handle("/refund-takeover t3")
    channel.thread = "t2"
    await channel.handle("/refund-handback")
    support = PEOPLE["support"]
    assert commands.calls == [
        ("refund_takeover", (support, "local-local-support-t3", True)),
        ("refund_takeover", (support, "local-local-support-t2", False)),
    ]
    assert out.getvalue().count("(only you can see this) refund_takeover done") == 2


async def test_the_approvers_reminder_opens_with_their_mention_and_nothing_else_does(
    tmp_path: Path,
) -> None:
    channel, out, _ = channel_on(tmp_path)
    threads = LocalThreadStore(SqliteDatabase(tmp_path))
    opening = await threads.open_thread("support", "customer", "refund order 4500")
    reminder = "Reminder for the refund approvers: order 4500 ($450.00) has waited an hour."
    posts: list[tuple[int, str, Mention | None]] = [
        (1, "Was the package opened?", None),
        (2, reminder, "approvers"),
    ]
    for seq, text, mention in posts:
        await threads.post(
            OutboundMessage(
                thread=thread_ref(opening.thread_id),
                key=MessageKey(workflow_id="local-local-support-t1", run_id="r", seq=seq),
                kind="info",
                text=text,
                mention=mention,
            )
        )
    await channel.show_new()
    stored = [m.text for m in await threads.messages() if m.author_is_bot]
    assert stored == ["Was the package opened?", f"{APPROVERS_MENTION} {reminder}"]
    assert f"[t1] refund-bot: @support-agents {reminder}" in out.getvalue()


async def test_chat_markup_is_shown_as_plain_words(tmp_path: Path) -> None:
    channel, out, commands = channel_on(tmp_path)
    commands.reply_text = "*local-local-support-t1*  (read from <https://docs.temporal.io|history>)"
    channel.me = PEOPLE["presenter"]
    await channel.handle("/refund-status t1")
    shown = out.getvalue()
    assert "local-local-support-t1  (read from history (https://docs.temporal.io))" in shown
    assert "*" not in shown and "<" not in shown


async def test_a_customers_answer_reaches_staff_as_the_characters_typed(tmp_path: Path) -> None:
    """Reproduces /refund-status printing a customer's answer raw: its escape code reached the
    terminal (here, red text) and its second line passed for one of the bot's."""
    channel, out, commands = channel_on(tmp_path)
    commands.reply_text = hostile_status("local-local-support-t1").shown()
    channel.me = PEOPLE["presenter"]
    await channel.handle("/refund-status t1")
    lines = out.getvalue().splitlines()
    assert f"    {ANSWERS_LINE}" in lines  # the marks kept: in a code span, they are the words
    assert "\x1b" not in out.getvalue()


def test_plain_strips_marks_only_where_chat_platforms_read_them() -> None:
    assert plain("*bold* and _italic_ and *two words*") == "bold and italic and two words"
    assert plain("<https://x.example/a?b=1|the link> <https://y.example>") == (
        "the link (https://x.example/a?b=1) https://y.example"
    )
    for unchanged in ("5*3*2", "refund_approver", "a * b", "snake_case_name", "*", "<@U123>"):
        assert plain(unchanged) == unchanged


async def test_a_message_in_a_finished_thread_says_how_to_start_a_new_one(tmp_path: Path) -> None:
    channel, out, _ = channel_on(tmp_path, Routed.CLOSED)
    await channel.handle("please refund order 1234")
    assert "Type /new, then your message, to start a new one." in out.getvalue()


async def test_words_a_command_does_not_take_are_an_answer_not_a_crash(tmp_path: Path) -> None:
    """Reproduces a typed command with more words than it takes (`/quit now`, `/as a b`)
    raising TypeError out of the channel's loop, which ended the terminal."""
    channel, out, commands = channel_on(tmp_path)
    channel.me = PEOPLE["presenter"]
    for line in ("/quit now", "/as support presenter", "/refund-status t1 t2", "/help me"):
        assert await channel.handle(line) is True, line
    assert out.getvalue().count("does not take") == 4
    assert channel.me == PEOPLE["presenter"] and commands.calls == []


async def test_a_command_that_fails_is_said_and_the_channel_goes_on(tmp_path: Path) -> None:
    """Reproduces a command whose work raised (Temporal not answering) ending the terminal."""
    channel, out, commands = channel_on(tmp_path)
    commands.fail = True
    channel.me = PEOPLE["presenter"]
    assert await channel.handle("/refund-status t1") is True
    assert "! /refund-status failed on our side" in out.getvalue()
    assert "Traceback" not in out.getvalue()

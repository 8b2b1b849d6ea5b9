"""The local platform: a support channel whose threads and messages live in SQLite.

It is the embedded default platform (no Slack or Discord account needed) and the local platform's
outbound half: the Worker posts the agent's messages here, and the terminal reads them back. A post
carries its stable key in a UNIQUE column, so a retried post_to_thread finds the earlier row
instead of writing a second one. An escalation's round is kept beside it (the terminal's numbered
choice carries it back), and an edit rewrites the row and is logged, so the terminal shows it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import aiosqlite
from pydantic import BaseModel
from temporalio.exceptions import ApplicationError

from agent.models import MessageEdit, OutboundMessage, PostedMessage
from agent.stores.db import open_db

SCHEMA = """
CREATE TABLE IF NOT EXISTS threads (
    thread_id TEXT PRIMARY KEY,
    channel TEXT NOT NULL,
    opened_by TEXT NOT NULL,
    opened_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id TEXT NOT NULL,
    message_key TEXT UNIQUE,
    author TEXT NOT NULL,
    author_is_bot INTEGER NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    actions TEXT NOT NULL DEFAULT '[]',
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_thread ON messages (thread_id, seq);
CREATE TABLE IF NOT EXISTS escalation_rounds (
    message_key TEXT PRIMARY KEY,
    round INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS edits (
    edit_seq INTEGER PRIMARY KEY AUTOINCREMENT,
    message_seq INTEGER NOT NULL,
    created_at TEXT NOT NULL
);
"""
# Every read of messages brings the escalation round along (NULL for other messages).
_SELECT = (
    "SELECT m.*, r.round FROM messages m "
    "LEFT JOIN escalation_rounds r ON r.message_key = m.message_key"
)

LOCAL_WORKSPACE = "local"
BOT_AUTHOR = "refund-bot"


class LocalMessage(BaseModel):
    seq: int
    thread_id: str
    message_key: str | None
    author: str
    author_is_bot: bool
    kind: str
    text: str
    actions: list[str]
    created_at: str
    round: int | None = None  # an escalation's round: the terminal's 1 / 2 answer this round

    @property
    def message_id(self) -> str:
        return f"local-{self.seq}"


class LocalThread(BaseModel):
    thread_id: str
    opened_by: str
    opened_at: str
    opening_text: str


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _row(row: aiosqlite.Row) -> LocalMessage:
    return LocalMessage(**{**dict(row), "actions": json.loads(row["actions"])})


class LocalThreadStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    async def open_thread(self, channel: str, author: str, text: str) -> LocalMessage:
        """A customer's first message in the channel: it becomes the root of a new thread.

        Threads are named t1, t2, t3, … in the order they open, one past the highest name in use,
        so a thread named by the earlier scheme (t<seq of its root message>) keeps its name and no
        name is ever given twice.
        """
        async with open_db(self.path, SCHEMA) as db:
            # One writer from here to the commit: two threads opened at once get two names.
            await db.execute("BEGIN IMMEDIATE")
            cursor = await db.execute(
                "SELECT MAX(CAST(SUBSTR(thread_id, 2) AS INTEGER)) FROM threads "
                "WHERE thread_id GLOB 't[0-9]*'"
            )
            (highest,) = await cursor.fetchone()  # type: ignore[misc]
            thread_id = f"t{(highest or 0) + 1}"
            await db.execute(
                "INSERT INTO threads VALUES (?, ?, ?, ?)", (thread_id, channel, author, _now())
            )
            cursor = await db.execute(
                "INSERT INTO messages (thread_id, author, author_is_bot, kind, text, created_at) "
                "VALUES (?, ?, 0, 'customer', ?, ?)",
                (thread_id, author, text, _now()),
            )
            seq = cursor.lastrowid
            await db.commit()
            cursor = await db.execute(f"{_SELECT} WHERE m.seq = ?", (seq,))
            return _row(await cursor.fetchone())

    async def threads(self) -> list[LocalThread]:
        """Every thread, oldest first, with its opening message."""
        async with open_db(self.path, SCHEMA) as db:
            cursor = await db.execute(
                "SELECT t.thread_id, t.opened_by, t.opened_at, m.text AS opening_text "
                "FROM threads t JOIN messages m ON m.thread_id = t.thread_id "
                "AND m.kind = 'customer' ORDER BY m.seq"
            )
            return [LocalThread(**dict(row)) for row in await cursor.fetchall()]

    async def add_reply(self, thread_id: str, author: str, text: str) -> LocalMessage:
        async with open_db(self.path, SCHEMA) as db:
            cursor = await db.execute(
                "INSERT INTO messages (thread_id, author, author_is_bot, kind, text, created_at) "
                "VALUES (?, ?, 0, 'reply', ?, ?)",
                (thread_id, author, text, _now()),
            )
            await db.commit()
            cursor = await db.execute(f"{_SELECT} WHERE m.seq = ?", (cursor.lastrowid,))
            return _row(await cursor.fetchone())

    async def post(self, message: OutboundMessage) -> PostedMessage:
        """ThreadPoster.post for the local platform: at most one row per message key."""
        async with open_db(self.path, SCHEMA) as db:
            cursor = await db.execute(
                "INSERT OR IGNORE INTO messages (thread_id, message_key, author, author_is_bot, "
                "kind, text, actions, created_at) VALUES (?, ?, ?, 1, ?, ?, ?, ?)",
                (
                    message.thread.thread,
                    str(message.key),
                    BOT_AUTHOR,
                    message.kind,
                    message.text,
                    json.dumps(message.actions),
                    _now(),
                ),
            )
            inserted = cursor.rowcount == 1
            if message.round is not None:
                await db.execute(
                    "INSERT OR IGNORE INTO escalation_rounds VALUES (?, ?)",
                    (str(message.key), message.round),
                )
            await db.commit()
            cursor = await db.execute(
                "SELECT seq FROM messages WHERE message_key = ?", (str(message.key),)
            )
            (seq,) = await cursor.fetchone()  # type: ignore[misc]
        return PostedMessage(platform_message_id=f"local-{seq}", duplicate=not inserted)

    async def edit(self, edit: MessageEdit) -> None:
        """ThreadPoster.edit for the local platform: the row's text and buttons are replaced."""
        text = f"{edit.text}\n{edit.outcome_line()}"
        async with open_db(self.path, SCHEMA) as db:
            await db.execute("BEGIN IMMEDIATE")  # one edit at a time: a retry logs no second edit
            cursor = await db.execute(
                "SELECT seq, text, actions FROM messages WHERE message_key = ?", (str(edit.key),)
            )
            row = await cursor.fetchone()
            if row is None:
                await db.rollback()
                raise ApplicationError(
                    f"no local message {edit.key} to edit",
                    type="LocalNoSuchMessage",
                    non_retryable=True,
                )
            if (row["text"], row["actions"]) != (text, "[]"):
                await db.execute(
                    "UPDATE messages SET text = ?, actions = '[]' WHERE seq = ?", (text, row["seq"])
                )
                await db.execute(
                    "INSERT INTO edits (message_seq, created_at) VALUES (?, ?)",
                    (row["seq"], _now()),
                )
            await db.commit()

    async def messages(
        self, thread_id: str | None = None, after_seq: int = 0
    ) -> list[LocalMessage]:
        async with open_db(self.path, SCHEMA) as db:
            if thread_id is None:
                cursor = await db.execute(f"{_SELECT} WHERE m.seq > ? ORDER BY m.seq", (after_seq,))
            else:
                cursor = await db.execute(
                    f"{_SELECT} WHERE m.thread_id = ? AND m.seq > ? ORDER BY m.seq",
                    (thread_id, after_seq),
                )
            return [_row(r) for r in await cursor.fetchall()]

    async def edits(self, after_edit: int = 0) -> list[tuple[int, LocalMessage]]:
        """(edit number, the message as it reads now) for every edit after `after_edit`."""
        async with open_db(self.path, SCHEMA) as db:
            cursor = await db.execute(
                "SELECT e.edit_seq, m.*, r.round FROM edits e JOIN messages m "
                "ON m.seq = e.message_seq LEFT JOIN escalation_rounds r "
                "ON r.message_key = m.message_key WHERE e.edit_seq > ? ORDER BY e.edit_seq",
                (after_edit,),
            )
            return [(row["edit_seq"], _row(row)) for row in await cursor.fetchall()]

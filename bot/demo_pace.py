"""/refund-demo's shared pace: the running story and the presenter's presses, in the database.

    /refund-demo                         -> DemoPace.claim: this bot process runs the story
    /refund-demo next|auto|crash|stop    -> DemoPace.press (on whichever bot replica took it)
    the story's process, every moment    -> DemoPace.presses (polled) -> the story's pace

With several `refund-bot bot` replicas behind a load balancer (Slack's HTTP mode), the presenter's
next command may reach any of them, while the story runs in the one that took `/refund-demo`. The
database every replica shares (DATABASE_URL) carries the presses across. One story at a time per
database: a claim is taken while the running story's process keeps reporting, and is free again
once it stops reporting for STALE_AFTER seconds (its process died) or releases it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from agent.stores.database import Connection, Database, Schema, both

# The story's process reports every second; a claim older than this belongs to no live story.
STALE_AFTER = 15.0
_SLOT = "side-by-side"

SCHEMA = Schema(
    "demo_pace",
    "bot.sqlite",
    (
        both(
            1,
            "the running story and the presses for it",
            """CREATE TABLE IF NOT EXISTS demo_story (
                slot TEXT PRIMARY KEY,
                story_id TEXT NOT NULL,
                channel TEXT NOT NULL,
                moment TEXT NOT NULL,
                upcoming TEXT NOT NULL,
                reported_ms BIGINT NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS demo_presses (
                press_id TEXT PRIMARY KEY,
                story_id TEXT NOT NULL,
                action TEXT NOT NULL,
                seconds DOUBLE PRECISION,
                pressed_ms BIGINT NOT NULL
            )""",
        ),
    ),
)


@dataclass(frozen=True)
class RunningStory:
    story_id: str
    channel: str  # where it runs, as the presenter would name it
    moment: str  # what it did last
    upcoming: str  # what the next press does ("" at the end)


@dataclass(frozen=True)
class Press:
    press_id: str
    action: str  # next | auto | crash | stop
    seconds: float | None  # auto's timer, when given


def _now_ms() -> int:
    return int(time.time() * 1000)


class DemoPace:
    def __init__(self, database: Database, stale_after: float = STALE_AFTER) -> None:
        self._database = database
        self._stale_ms = int(stale_after * 1000)

    async def claim(self, story_id: str, channel: str, moment: str) -> RunningStory | None:
        """Take the slot for `story_id`; None if taken, else the story that holds it."""
        now = _now_ms()
        async with self._database.connect(SCHEMA) as db, db.transaction():
            # One statement decides between two replicas claiming at once: the row's key.
            await db.execute(
                "INSERT INTO demo_story (slot, story_id, channel, moment, upcoming, reported_ms) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (slot) DO UPDATE SET "
                "story_id = excluded.story_id, channel = excluded.channel, "
                "moment = excluded.moment, upcoming = excluded.upcoming, "
                "reported_ms = excluded.reported_ms WHERE demo_story.reported_ms < ?",
                _SLOT, story_id, channel, moment, moment, now, now - self._stale_ms,
            )  # fmt: skip
            holder = await self._running(db, now)
        return None if holder is not None and holder.story_id == story_id else holder

    async def report(self, story_id: str, moment: str, upcoming: str) -> None:
        """The story is alive, and where it stands."""
        async with self._database.connect(SCHEMA) as db:
            await db.execute(
                "UPDATE demo_story SET moment = ?, upcoming = ?, reported_ms = ? "
                "WHERE slot = ? AND story_id = ?",
                moment, upcoming, _now_ms(), _SLOT, story_id,
            )  # fmt: skip

    async def release(self, story_id: str) -> None:
        async with self._database.connect(SCHEMA) as db, db.transaction():
            await db.execute(
                "DELETE FROM demo_story WHERE slot = ? AND story_id = ?", _SLOT, story_id
            )
            await db.execute("DELETE FROM demo_presses WHERE story_id = ?", story_id)

    async def running(self) -> RunningStory | None:
        async with self._database.connect(SCHEMA) as db:
            return await self._running(db, _now_ms())

    async def _running(self, db: Connection, now: int) -> RunningStory | None:
        row = await db.fetchrow(
            "SELECT story_id, channel, moment, upcoming FROM demo_story "
            "WHERE slot = ? AND reported_ms >= ?",
            _SLOT, now - self._stale_ms,
        )  # fmt: skip
        return RunningStory(**dict(row)) if row is not None else None

    async def press(self, story_id: str, action: str, seconds: float | None = None) -> None:
        async with self._database.connect(SCHEMA) as db:
            await db.execute(
                "INSERT INTO demo_presses (press_id, story_id, action, seconds, pressed_ms) "
                "VALUES (?, ?, ?, ?, ?)",
                uuid.uuid4().hex, story_id, action, seconds, _now_ms(),
            )  # fmt: skip

    async def presses(self, story_id: str, seen: set[str]) -> list[Press]:
        """The presses for `story_id` not in `seen`, oldest first (`seen` grows by them)."""
        async with self._database.connect(SCHEMA) as db:
            rows = await db.fetch(
                "SELECT press_id, action, seconds FROM demo_presses WHERE story_id = ? "
                "ORDER BY pressed_ms, press_id",
                story_id,
            )
        fresh = [Press(**dict(row)) for row in rows if row["press_id"] not in seen]
        seen.update(p.press_id for p in fresh)
        return fresh

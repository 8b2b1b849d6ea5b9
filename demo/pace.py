"""/refund-demo's shared pace: the running story and the presenter's presses, in the database.

    /refund-demo                         -> DemoPace.claim: the lease "refund-demo", this story's
    /refund-demo next|auto|crash|stop    -> DemoPace.press (on whichever bot replica took it)
    the story's process, every moment    -> DemoPace.report (renews the lease) ; presses (polled)

With several `refund-bot bot` replicas behind a load balancer (Slack's HTTP mode), the presenter's
next command may reach any of them, while the story runs in the one that took `/refund-demo`. The
database every replica shares (DATABASE_URL) carries the presses across. One story at a time per
database: the story holds a lease (bot/lease.py) named by its id while its process keeps
reporting; it is free again once the process releases it, or stops renewing it for STALE_AFTER
seconds (it died).
"""

from __future__ import annotations

import socket
import time
import uuid
from dataclasses import dataclass

from agent.stores.database import Database, Schema, both
from bot.lease import DatabaseLease

# The story's process reports every moment it polls (a quarter of a second); a lease not renewed
# for this long belongs to no live story.
STALE_AFTER = 15.0
LEASE = "refund-demo"

SCHEMA = Schema(
    "demo_pace",
    "bot.sqlite",
    (
        both(
            1,
            "the running story's moment and the presses for it",
            """CREATE TABLE IF NOT EXISTS demo_story (
                story_id TEXT PRIMARY KEY,
                channel TEXT NOT NULL,
                moment TEXT NOT NULL,
                upcoming TEXT NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS demo_presses (
                press_id TEXT PRIMARY KEY,
                story_id TEXT NOT NULL,
                action TEXT NOT NULL,
                seconds DOUBLE PRECISION,
                pressed_ms BIGINT NOT NULL
            )""",
        ),
        # Two presses in one millisecond (a presenter's replicas, or a script) kept their order
        # only by chance: the press id is random.
        both(
            2,
            "presses ordered to the nanosecond",
            "ALTER TABLE demo_presses ADD COLUMN pressed_ns BIGINT NOT NULL DEFAULT 0",
        ),
    ),
)


@dataclass(frozen=True)
class RunningStory:
    story_id: str
    channel: str  # where it runs, as the presenter would name it
    moment: str  # what it did last
    upcoming: str  # what the next press does ("" at the end)


# A claim that finds the slot held reads which story holds it; these many tries, when the holder
# ends or starts between those two reads, before it answers that the slot is taken.
CLAIM_TRIES = 3


@dataclass(frozen=True)
class Press:
    press_id: str
    action: str  # next | auto | crash | stop
    seconds: float | None  # auto's timer, when given


class DemoPace:
    def __init__(
        self, database: Database, host: str | None = None, stale_after: float = STALE_AFTER
    ) -> None:
        self._database = database
        self._host = host or socket.gethostname()
        self._stale_after = stale_after
        self._leases: dict[str, DatabaseLease] = {}  # the stories this process tells

    def _lease(self, story_id: str = "") -> DatabaseLease:
        # The lease's holder is the story's id: another replica reads which story runs from it.
        return DatabaseLease(
            self._database, LEASE, self._host, self._stale_after, holder=story_id or None
        )

    async def claim(self, story_id: str, channel: str, moment: str) -> RunningStory | None:
        """Take the lease for `story_id`: None if taken, else the story that holds it."""
        claim = self._lease(story_id)
        for _ in range(CLAIM_TRIES):
            holder = await claim.try_acquire()
            if holder is None:
                break
            if (running := await self.running()) is not None:
                return running
            # Its holder's lease ran out between the two reads (the slot may be free now: try
            # again), or its story is being started or let go (no row yet, or none left).
        else:
            assert holder is not None  # every try found the slot held
            return RunningStory(holder.holder, "another channel", "starting or stopping", "")
        self._leases[story_id] = claim
        async with self._database.connect(SCHEMA) as db:
            await db.execute(
                "INSERT INTO demo_story (story_id, channel, moment, upcoming) VALUES (?, ?, ?, ?)",
                story_id, channel, moment, moment,
            )  # fmt: skip
        return None

    async def report(self, story_id: str, moment: str, upcoming: str) -> None:
        """The story is alive (its lease renewed), and where it stands."""
        claim = self._leases.get(story_id)
        if claim is None or await claim.try_acquire() is not None:
            return  # not this process's story, or it lost the lease: nothing of it to say
        async with self._database.connect(SCHEMA) as db:
            await db.execute(
                "UPDATE demo_story SET moment = ?, upcoming = ? WHERE story_id = ?",
                moment, upcoming, story_id,
            )  # fmt: skip

    async def release(self, story_id: str) -> None:
        async with self._database.connect(SCHEMA) as db, db.transaction():
            await db.execute("DELETE FROM demo_story WHERE story_id = ?", story_id)
            await db.execute("DELETE FROM demo_presses WHERE story_id = ?", story_id)
        if (claim := self._leases.pop(story_id, None)) is not None:
            await claim.release()

    async def running(self) -> RunningStory | None:
        holder = await self._lease().holder_now()
        if holder is None:
            return None
        async with self._database.connect(SCHEMA) as db:
            row = await db.fetchrow(
                "SELECT story_id, channel, moment, upcoming FROM demo_story WHERE story_id = ?",
                holder.holder,
            )
        return RunningStory(**dict(row)) if row is not None else None

    async def press(self, story_id: str, action: str, seconds: float | None = None) -> None:
        now = time.time_ns()
        async with self._database.connect(SCHEMA) as db:
            await db.execute(
                "INSERT INTO demo_presses "
                "(press_id, story_id, action, seconds, pressed_ms, pressed_ns) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                uuid.uuid4().hex, story_id, action, seconds, now // 1_000_000, now,
            )  # fmt: skip

    async def presses(self, story_id: str, seen: set[str]) -> list[Press]:
        """The presses for `story_id` not in `seen`, oldest first (`seen` grows by them)."""
        async with self._database.connect(SCHEMA) as db:
            rows = await db.fetch(
                "SELECT press_id, action, seconds FROM demo_presses WHERE story_id = ? "
                "ORDER BY pressed_ms, pressed_ns, press_id",
                story_id,
            )
        fresh = [Press(**dict(row)) for row in rows if row["press_id"] not in seen]
        seen.update(p.press_id for p in fresh)
        return fresh

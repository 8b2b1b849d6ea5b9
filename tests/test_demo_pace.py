"""/refund-demo's shared pace on SQLite and PostgreSQL: one story per database, presses for it.

claim (a lease) -> another claim is told which story runs -> presses from any replica, each read
once -> the story stops reporting -> after STALE_AFTER the lease is free; release frees it at once
"""

from __future__ import annotations

from agent.stores.database import Database
from bot.lease import SCHEMA as LEASE_SCHEMA
from bot.lease import DatabaseLease
from demo.pace import LEASE, SCHEMA, DemoPace, RunningStory
from harness.conditions import wait_for


async def test_one_story_at_a_time_and_its_presses_from_any_replica(database: Database) -> None:
    await database.migrate(SCHEMA, LEASE_SCHEMA)
    runner, other = DemoPace(database), DemoPace(database)  # two bot replicas, one database
    assert await runner.claim("story-a", "slack C0SUPPORT", "opening") is None
    taken = await other.claim("story-b", "discord 42", "opening")
    assert taken is not None and (taken.story_id, taken.channel) == ("story-a", "slack C0SUPPORT")

    await runner.report("story-a", "both chose the refund", "the crash")
    running = await other.running()
    assert running is not None and running.upcoming == "the crash"
    await other.press("story-a", "next")
    await other.press("story-a", "auto", 2.5)
    seen: set[str] = set()
    presses = await runner.presses("story-a", seen)
    assert [(p.action, p.seconds) for p in presses] == [("next", None), ("auto", 2.5)]
    assert await runner.presses("story-a", seen) == []  # each press is taken once

    await runner.release("story-a")
    assert await other.running() is None
    assert await other.claim("story-b", "discord 42", "opening") is None


async def test_a_story_whose_process_died_frees_the_slot(database: Database) -> None:
    await database.migrate(SCHEMA, LEASE_SCHEMA)
    # Long enough that the new claim is still fresh when it is read back on a loaded machine (with
    # 3 s the read-back found no running story once, on PostgreSQL, in a clean-clone CI run).
    dead, alive = DemoPace(database, stale_after=6.0), DemoPace(database, stale_after=6.0)
    assert await dead.claim("story-a", "local support", "opening") is None

    async def claimed() -> bool:
        return await alive.claim("story-b", "local support", "opening") is None

    await wait_for(claimed, timeout=20, what="the stale story's slot to be taken")
    running = await dead.running()
    assert running is not None and running.story_id == "story-b"
    await alive.report("story-b", "opening", "the first question")
    await dead.report("story-a", "late", "")  # the old story's report changes nothing
    running = await alive.running()
    assert running is not None and running.upcoming == "the first question"


async def test_a_slot_freed_while_a_claim_reads_it_is_taken_by_that_claim(
    database: Database,
) -> None:
    """The holder's lease runs out between the claim's failed take and its read of who holds it:
    the claim takes the slot then, never answering "yours" for a slot nobody holds."""
    await database.migrate(SCHEMA, LEASE_SCHEMA)
    dead, alive = DemoPace(database, stale_after=0.5), DemoPace(database, stale_after=0.5)
    assert await dead.claim("story-a", "local support", "opening") is None
    read = alive.running

    async def holder_gone() -> bool:
        return await dead.running() is None

    async def read_late() -> RunningStory | None:
        # The slot's holder expires meanwhile.
        await wait_for(holder_gone, timeout=10, what="story-a's lease to run out")
        return await read()

    alive.running = read_late  # type: ignore[method-assign]
    assert await alive.claim("story-b", "local support", "opening") is None
    running = await dead.running()
    assert running is not None and running.story_id == "story-b"


async def test_a_slot_held_by_a_story_still_starting_is_not_taken(database: Database) -> None:
    """The lease is held but its story's row is not written yet (another replica between the two
    steps of its claim): the claim is told the slot is taken."""
    await database.migrate(SCHEMA, LEASE_SCHEMA)
    starting = DatabaseLease(database, LEASE, "host-a", 30.0, holder="story-a")
    assert await starting.try_acquire() is None
    told = await DemoPace(database).claim("story-b", "local support", "opening")
    assert told is not None and told.story_id == "story-a"

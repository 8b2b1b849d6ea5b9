"""`/refund-demo` on any platform: start the story, or move the running one on.

    /refund-demo [next|auto [s]|crash|stop] -> Commands.refund_demo -> SideBySideDemos.command
        start: claim the pace (one story per database) -> the story runs in this process
        else:  DemoPace.press -> the story's process reads it (PRESS_POLL) -> Pace.next / go_auto

The presses cross the database every bot replica shares (demo/pace.py), so the presenter's next
command may reach any replica while the story runs in the one that took `/refund-demo`.
"""

from __future__ import annotations

import asyncio
import logging
import time

from bot.commands import ChannelRef, CommandReply, DemoStage
from demo.pace import DemoPace
from demo.parts import DemoFailed
from demo.side_by_side import Pace, SideBySide, StoryParts, Summary
from demo.stage import story_stage
from demo.stages import PlatformStages

log = logging.getLogger(__name__)

PRESS_POLL = 0.25  # how often the story reads the presenter's presses
REPORT_EVERY = 1.0  # and renews its claim (demo.pace.STALE_AFTER is far longer)


class SideBySideDemos:
    """bot.commands.SideBySideDemo: one story at a time per database, run in the bot process that
    took `/refund-demo` and paced by presses that any bot process may take (demo/pace.py)."""

    def __init__(self, parts: StoryParts, board: DemoPace, auto_delay: float = 4.0) -> None:
        self.parts = parts
        self.board = board
        self.auto_delay = auto_delay
        self.stages = PlatformStages()
        self._tasks: set[asyncio.Task[None]] = set()

    async def command(
        self, action: str, stage: DemoStage, channel: ChannelRef, seconds: float | None = None
    ) -> CommandReply:
        if action in ("", "start"):
            return await self._start(stage, channel)
        running = await self.board.running()
        if running is None:
            return CommandReply(
                ok=False, text="No side-by-side demo is running: /refund-demo starts one."
            )
        if action == "crash" and not running.upcoming.startswith("the crash"):
            return CommandReply(
                ok=False,
                text=f"The crash comes once both agents chose the refund; now: {running.moment}. "
                "/refund-demo next moves on.",
            )
        await self.board.press(running.story_id, action, seconds)
        if action == "stop":
            return CommandReply(text="The side-by-side demo stops.")
        if action == "auto":
            every = f"{seconds:g} s" if seconds is not None else "timer"
            return CommandReply(text=f"Running the rest on a {every} (now: {running.moment}).")
        return CommandReply(text=f"Next: {running.upcoming or 'the end'}.")

    async def aclose(self) -> None:
        """End the stories this process tells (their plain processes stop, their claims go)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _start(self, stage: DemoStage, channel: ChannelRef) -> CommandReply:
        story = SideBySide(self.parts, story_stage(stage), channel, Pace(self.auto_delay))
        where = f"{channel.platform} {channel.channel}"
        if (running := await self.board.claim(story.story_id, where, story.moment)) is not None:
            return CommandReply(
                ok=False,
                text=f"A side-by-side demo is already running in {running.channel} (now: "
                f"{running.moment}). /refund-demo next, auto, crash or stop.",
            )
        task = asyncio.create_task(self._tell(story), name=f"side-by-side {story.story_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return CommandReply(
            text="Two threads open in this channel: *Without Temporal* and *With "
            "Temporal*, one customer, the same answers. Each `/refund-demo next` moves "
            "both on one moment; `/refund-demo auto [seconds]` runs the rest on a timer; "
            "`/refund-demo crash` SIGKILLs both processes once both chose the refund."
        )

    async def _tell(self, story: SideBySide) -> None:
        """The story, and beside it the presses it takes and its reports, until it ends."""
        telling = asyncio.create_task(story.run())
        follow = asyncio.create_task(self._follow(story, telling))
        try:
            await telling
        except asyncio.CancelledError:
            log.info("side-by-side demo %s stopped", story.story_id)
            if (me := asyncio.current_task()) is not None and me.cancelling():
                raise  # this process is stopping (aclose), not only the story (`stop`)
        except DemoFailed as err:
            log.warning("side-by-side demo %s ended early: %s", story.story_id, err)
        finally:
            follow.cancel()
            await asyncio.gather(follow, return_exceptions=True)
            await self.board.release(story.story_id)

    async def _follow(self, story: SideBySide, telling: asyncio.Task[Summary]) -> None:
        seen: set[str] = set()
        reported: tuple[str, str] | None = None
        renewed = 0.0
        while True:
            try:
                # Its moment when it changes, and its lease renewed every second in any case.
                now, state = time.monotonic(), (story.moment, story.upcoming)
                if state != reported or now - renewed >= REPORT_EVERY:
                    await self.board.report(story.story_id, *state)
                    reported, renewed = state, now
                for press in await self.board.presses(story.story_id, seen):
                    if press.action == "stop":
                        telling.cancel()
                    elif press.action == "auto":
                        story.pace.go_auto(press.seconds)
                    else:  # next, and crash (checked against the story's moment when pressed)
                        story.pace.next()
            except Exception:  # the database hiccuped: the next round reads the presses again
                log.exception("side-by-side demo %s: reading the presses failed", story.story_id)
            await asyncio.sleep(PRESS_POLL)

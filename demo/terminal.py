"""`refund-bot demo --side-by-side`: the two demos side by side, unattended, in the terminal.

    the composition root's running stack -> SideBySide on the local stage, every moment in turn
        -> the terminal channel's printer shows each post as it lands -> FAIL lines, exit status

The same story as /refund-demo (demo/side_by_side.py), on a timer of 0 s instead of the
presenter's presses; exit status 0 only if every count is the docs page's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agent.settings import AgentSettings
from agent.stores.databases import database_for
from bot.commands import ChannelRef, WorkerControl
from bot.local.terminal import CHANNEL, LocalChannel
from bot.local.thread_store import LOCAL_WORKSPACE, LocalThreadStore
from demo.local_stage import LocalStage
from demo.parts import DemoFailed, RunningStack
from demo.side_by_side import Pace, SideBySide, StoryParts
from worker.control import RestartReport
from worker.supervisor import WorkerSupervisor


@dataclass(frozen=True)
class SupervisorInProcess:
    """bot.commands.WorkerControl over this process's own supervisor (`refund-bot demo`, tests):
    the same calls, without the trip through Temporal."""

    supervisor: WorkerSupervisor

    async def supervisor_hosts(self) -> list[str]:
        return [self.supervisor.host]

    async def restart(
        self, host: str | None, while_down: Callable[[], Awaitable[None]] | None = None
    ) -> RestartReport:
        if host not in (None, self.supervisor.host):
            raise ValueError(f"this process supervises {self.supervisor.host!r}, not {host!r}")
        return await self.supervisor.restart(kill=True, while_down=while_down)


async def side_by_side(stack: RunningStack, settings: AgentSettings, workers: WorkerControl) -> int:
    """The story on `stack`; `workers`: its supervisor, in this process."""
    threads = LocalThreadStore(database_for(settings))
    print(f"Temporal at {stack.temporal.address}; Web UI: {stack.web_ui}", flush=True)
    parts = StoryParts(stack.client, stack.temporal, settings, stack.inbox, workers)
    channel = ChannelRef(platform="local", workspace=LOCAL_WORKSPACE, channel=CHANNEL)
    story = SideBySide(parts, LocalStage(threads), channel, Pace(0.0, auto=True))
    # The terminal channel's own printer shows every post as it lands, frames included.
    printer = LocalChannel(threads, stack.router, stack.commands)
    await printer.catch_up()
    tail = asyncio.create_task(_tail(printer))
    try:
        summary = await story.run()
    except DemoFailed as err:
        print(f"FAIL the story stopped: {err}", flush=True)
        return 1
    finally:
        tail.cancel()
        await asyncio.gather(tail, return_exceptions=True)
        await printer.show_new()
    problems = summary.problems()
    for problem in problems:
        print(f"FAIL {problem}", flush=True)
    return 1 if problems else 0


async def _tail(channel: LocalChannel) -> None:
    while True:
        await channel.show_new()
        await asyncio.sleep(0.2)

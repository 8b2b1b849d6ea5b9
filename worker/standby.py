"""The warm standby: the next Worker process, started before it is needed.

    prepare -> `refund-bot worker --standby`: imported, connected, stores open, waiting on stdin
    promote -> "go" on its stdin -> it polls   (end of file instead: it leaves without polling)

A crash then costs a poller's start, not a Python start-up. The supervisor decides when: it
promotes the standby in place of a dead Worker, and prepares the next one once that one polls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Process = asyncio.subprocess.Process


class WarmStandby:
    """At most one standby process; `spawn` starts one (the supervisor's, with `--standby`)."""

    def __init__(self, spawn: Callable[[], Awaitable[Process]]) -> None:
        self._spawn = spawn
        self.proc: Process | None = None  # EXECUTION STATE: the next Worker

    @property
    def pid(self) -> int | None:
        """The standby's pid, while one waits alive."""
        proc = self.proc
        return proc.pid if proc and proc.returncode is None else None

    def holds(self, proc: Process) -> bool:
        return proc is self.proc

    async def prepare(self) -> None:
        """Start a standby, unless one is there already."""
        if self.proc is not None:
            return
        self.proc = await self._spawn()
        log.info("Standby Worker pid %s preparing", self.proc.pid)

    async def promote(self) -> Process | None:
        """Tell the standby to poll and hand it over; None if none is alive. One still starting up
        polls once ready (the line waits in its stdin): sooner than a new one."""
        standby, self.proc = self.proc, None
        if standby is None or standby.returncode is not None or standby.stdin is None:
            return None
        try:
            standby.stdin.write(b"go\n")
            await standby.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):  # it died just now: its watcher saw it
            return None
        log.info("Standby pid %s promoted", standby.pid)
        return standby

    def take(self) -> Process | None:
        """Let the standby go, to stop it."""
        standby, self.proc = self.proc, None
        return standby

    def forget(self, proc: Process) -> None:
        """`proc` died before it was needed."""
        if self.proc is proc:
            self.proc = None

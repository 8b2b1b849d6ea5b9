"""What a process costs, read from /proc (Linux): CPU seconds, resident memory, idleness.

    pid -> /proc/<pid>/stat (utime + stime) -> cpu_seconds;  /proc/<pid>/status -> rss_bytes

The benchmarks read every process they compare (Workers, the Temporal server, the Slack app) the
same way, from outside the process, so no process measures itself.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds `pid` has used so far (its threads included, not its children)."""
    with open(f"/proc/{pid}/stat") as stat:
        # The command name (field 2) may hold spaces and parentheses: split after its last ")".
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_bytes(pid: int) -> int:
    """Resident memory of `pid` now (VmRSS)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


async def wait_idle(pid: int, *, quiet: float = 0.1, within: float = 5.0) -> bool:
    """Wait until `pid` has used no CPU for `quiet` seconds (at the clock tick's resolution);
    False if it was still busy `within` seconds."""
    deadline = time.monotonic() + within
    last, since = cpu_seconds(pid), time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet / 4)
        now = cpu_seconds(pid)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return True
    return False


@dataclass
class Usage:
    """CPU used and the highest RSS seen, per process, over a measured window."""

    cpu: dict[int, float] = field(default_factory=dict)
    peak_rss: dict[int, int] = field(default_factory=dict)


class Sampler:
    """Samples the RSS of `pids` every `interval` seconds while running; CPU from start to stop.

    async with Sampler([worker, server]) as sampler:
        ... the measured work ...
    sampler.usage.cpu[worker], sampler.usage.peak_rss[server]
    """

    def __init__(self, pids: Iterable[int], interval: float = 0.2) -> None:
        self.pids = list(pids)
        self.interval = interval
        self.usage = Usage()
        self.seconds = 0.0
        self._start_cpu: dict[int, float] = {}
        self._started = 0.0
        self._task: asyncio.Task[None] | None = None

    def _sample(self) -> None:
        for pid in self.pids:
            self.usage.peak_rss[pid] = max(self.usage.peak_rss.get(pid, 0), rss_bytes(pid))

    async def _run(self) -> None:
        while True:
            self._sample()
            await asyncio.sleep(self.interval)

    async def __aenter__(self) -> Sampler:
        self._start_cpu = {pid: cpu_seconds(pid) for pid in self.pids}
        self._started = time.monotonic()
        self._task = asyncio.create_task(self._run(), name="proc sampler")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self.seconds = time.monotonic() - self._started
        self._sample()
        self.usage.cpu = {pid: cpu_seconds(pid) - self._start_cpu[pid] for pid in self.pids}

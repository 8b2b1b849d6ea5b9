"""The chaos drill's processes: a Temporal dev server it owns, refund-bot commands it keeps running.

    TemporalServer: `temporal server start-dev` on a database file (worker.server's own command)
        -> kill() (SIGKILL) -> start() again on the same file | pause() (SIGSTOP) -> resume()
    Service: one refund-bot command, restarted when it exits, as systemd's Restart= does
        -> kill() (SIGKILL of the command; its children go with it) | pause() -> resume() | stop()
    left_behind(marker): every process on the machine whose environment carries the drill's marker

Every child gets the drill's marker in its environment (`MARKER_ENV`), and so does everything it
starts: at the end, /proc says whether any of them outlived the drill, whoever its parent is now.
Output goes to one log file per process (every incarnation appended), never into memory: a drill
runs for minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent.settings import TemporalSettings
from harness import free_port
from harness.cli_process import descendants
from worker.lifecycle import command_line, spawn_child, terminate
from worker.server import EmbeddedTemporal, temporal_answers

# In every process the drill starts (and so in everything they start): whose they are.
MARKER_ENV = "REFUND_BOT_CHAOS_RUN"
START_TIMEOUT = 90.0


def pause(pids: set[int] | list[int]) -> list[int]:
    """SIGSTOP each of `pids` still alive; returns those stopped (to resume)."""
    stopped = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
    return stopped


def resume(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def left_behind(marker: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment holds MARKER_ENV=`marker`
    (zombies excluded: they are gone, only not yet reaped by their parent)."""
    wanted = f"{MARKER_ENV}={marker}".encode()
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if wanted not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue  # it ended while we looked, or is not ours to read
        found[int(entry)] = " ".join(command_line(int(entry)) or ["?"])
    return found


class TemporalServer:
    """The drill's Temporal: the dev server refund-bot embeds (worker.server's command: WAL, the
    dynamic config), on a database file that outlives each process. The refund-bot processes it
    serves add their search attributes as they start."""

    def __init__(self, data_dir: Path, env: Mapping[str, str]) -> None:
        self.settings = TemporalSettings(
            _env_file=None,
            address=f"127.0.0.1:{free_port()}",
            ui_port=free_port(),
        )
        self._server = EmbeddedTemporal(self.settings, data_dir)
        self.address = self.settings.address
        self.log_path = data_dir / "temporal-server.log"
        self._env = dict(env)
        self._proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self) -> None:
        """Start it on its database (the same file every time) and wait until it answers."""
        self._server.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._proc = await spawn_child(
                self._server.command(),
                on_parent_death=signal.SIGTERM,
                env=self._env,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )
        self.starts += 1
        deadline = time.monotonic() + START_TIMEOUT
        while not await temporal_answers(self.address, 0.5):
            if self._proc.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"Temporal at {self.address} did not answer (exit {self._proc.returncode}); "
                    f"see {self.log_path}"
                )
            await asyncio.sleep(0.1)

    async def kill(self) -> None:
        assert self._proc is not None
        with contextlib.suppress(ProcessLookupError):
            self._proc.kill()
        await self._proc.wait()

    def pause(self) -> list[int]:
        return pause([self._proc.pid]) if self.running and self._proc else []

    async def stop(self) -> int | None:
        if self._proc is None:
            return None
        proc, self._proc = self._proc, None
        resume([proc.pid])  # a paused server would not hear the SIGTERM
        return await terminate(proc, 15.0)


@dataclass
class Service:
    """One refund-bot command (`args`, e.g. ["-v", "bot"]) kept running: when it exits, for any
    reason, it is started again `restart_after` seconds later (systemd's Restart= and RestartSec=),
    until `stop()`."""

    name: str
    args: list[str]
    env: dict[str, str]
    cwd: Path
    restart_after: float = 2.0
    log_path: Path = field(init=False)
    starts: int = 0
    exits: list[tuple[float, int]] = field(default_factory=list)  # (time.monotonic(), status)
    _proc: asyncio.subprocess.Process | None = None
    _keeper: asyncio.Task[None] | None = None
    _stopping: bool = False
    _started: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.log_path = self.cwd / f"{self.name}.log"

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    def tree(self) -> set[int]:
        """The command's process and everything below it now."""
        pid = self.pid
        return {pid, *descendants(pid)} if pid is not None else set()

    def children_running(self, *words: str) -> list[int]:
        """Live processes below the command whose command line holds every one of `words`."""
        pid = self.pid
        if pid is None:
            return []
        found = []
        for child in sorted(descendants(pid)):
            argv = command_line(child) or []
            if all(word in argv for word in words):
                found.append(child)
        return found

    async def start(self) -> None:
        self._stopping = False
        await self._spawn()
        self._keeper = asyncio.create_task(self._keep(), name=f"keep {self.name}")

    async def _spawn(self) -> None:
        with self.log_path.open("ab") as log:
            log.write(
                f"\n==== start {self.starts + 1} of {self.name} at {time.time():.3f}\n".encode()
            )
            log.flush()
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "refund_bot",
                *self.args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,  # no developer .env is read there
            )
        self.starts += 1
        self._started.set()

    async def _keep(self) -> None:
        while True:
            assert self._proc is not None
            code = await self._proc.wait()
            self.exits.append((time.monotonic(), code))
            if self._stopping:
                return
            await asyncio.sleep(self.restart_after)
            if self._stopping:
                return
            await self._spawn()

    def kill(self) -> int | None:
        """SIGKILL the command itself (not its children: they are tied to its life)."""
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pid

    async def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (after a SIGCONT, in case it is paused), as systemd stops a unit; its exit
        status, or None if it was not running. SIGKILL for the tree after `timeout`."""
        self._stopping = True
        proc = self._proc
        tree = self.tree()
        resume(list(tree))
        code: int | None = None
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                for pid in self.tree():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                code = await proc.wait()
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
        return code

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

"""`refund-bot run` as a real child process, for end-to-end tests of the whole program.

    RefundBotProcess(env, cwd) -> start() -> (the test drives the fakes) -> stop() -> output

Its environment is exactly what the test gives on top of a cleaned copy of this one (no developer
settings, no proxies), its working directory a temporary one (no `.env`), stdin not a terminal.
stdout and stderr go to files, so a test can read what an operator would see. stop() interrupts it
as Ctrl-C does, and whatever it started that is still alive afterwards is killed and reported.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.support import pid_alive
from tests.support.conditions import wait_for

# Settings a developer's shell might hold that would point the process somewhere else.
_CLEARED_PREFIXES = ("SLACK_", "DISCORD_", "TEMPORAL_", "STRIPE_", "OPENAI_", "REFUND_", "AGENT_")
_CLEARED = {"DATA_DIR", "DEMO_CUSTOMER_FOR_NEW_USERS", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"}


def clean_environment(**settings: str) -> dict[str, str]:
    """This process's environment without refund-bot's settings or proxies, plus `settings`."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(_CLEARED_PREFIXES) and name.upper() not in _CLEARED
    }
    return {**env, **settings}


def descendants(pid: int) -> set[int]:
    """Every live process below `pid`, read from /proc (children of children included)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # The command name may hold spaces and parentheses: the fields follow the last ")".
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


class RefundBotProcess:
    def __init__(self, env: dict[str, str], cwd: Path, args: tuple[str, ...] = ()) -> None:
        self.env, self.cwd, self.args = env, cwd, args
        self.stdout_path = cwd / "refund-bot.out"
        self.stderr_path = cwd / "refund-bot.err"
        self.proc: subprocess.Popen[bytes] | None = None
        self._family: set[int] = set()

    def start(self) -> None:
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "refund_bot", *self.args, "run"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=self.env,
                cwd=self.cwd,
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def remember_children(self) -> None:
        """Note every process it runs now (the Worker child, …), to be sure they end with it."""
        assert self.proc is not None
        self._family |= descendants(self.proc.pid)

    async def wait_for_stderr(self, pattern: str, *, count: int = 1, timeout: float = 60) -> list:
        """The first `count` matches of `pattern` in stderr, once there are that many."""
        regex = re.compile(pattern, re.MULTILINE)

        def matched() -> list[str] | None:
            assert self.running, f"refund-bot run ended:\n{self.stderr()}"
            found = regex.findall(self.stderr())
            return found[:count] if len(found) >= count else None

        return await wait_for(matched, timeout=timeout, what=f"{count} x {pattern!r} in stderr")

    async def stop(self, timeout: float = 30) -> int:
        """Ctrl-C, then wait (the fakes it talks to keep answering meanwhile); returns the exit
        status. Anything it left running is killed, and the test fails saying so."""
        assert self.proc is not None
        proc = self.proc
        self.remember_children()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                await wait_for(lambda: proc.poll() is not None, timeout=timeout, what="the exit")
            except AssertionError:
                proc.kill()
                proc.wait(timeout=10)
                raise AssertionError(f"refund-bot run ignored Ctrl-C:\n{self.stderr()}") from None

        def gone() -> bool:
            return not self._alive()

        try:
            await wait_for(gone, timeout=10, what="every process it started to end")
        finally:
            left = self._alive()
            for pid in left:
                os.kill(pid, signal.SIGKILL)
        return proc.returncode

    def _alive(self) -> set[int]:
        return {pid for pid in self._family if pid_alive(pid) and not _zombie(pid)}


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False

"""A real `refund-bot` command in a child process: its output read as it comes, its tree walked.

    RefundBotProcess.start(["run"], env, cwd) -> expect(pattern) -> tree() -> send(signal)
        -> exit_code() | stop() (Ctrl-C, and nothing it started left alive) -> close()

Its environment is exactly what the test gives on top of `clean_environment()` (no developer
settings, no proxies), its working directory the test's (no `.env` is read there), its stdin
/dev/null (not a terminal, as under a service manager). `close()` SIGKILLs whatever of its tree is
left, so a failing test leaves no server behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness import free_port
from harness.conditions import wait_for
from refund_bot.config import setting_names
from worker.lifecycle import alive, started_at

# Every fake a test runs is on loopback: a developer's proxy must not be asked for it.
_PROXIES = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}


def clean_environment(**settings: str) -> dict[str, str]:
    """This process's environment without any refund-bot setting a developer may have set, nor
    proxies; metrics off (ports are shared by every test run on the machine); then `settings`.
    For a child that must see only the settings its test gives it (run it where no .env is)."""
    dropped = setting_names() | _PROXIES
    kept = {k: v for k, v in os.environ.items() if k not in dropped}
    return {**kept, "METRICS_ADDRESS": "off", "WORKER_METRICS_ADDRESS": "off", **settings}


def fresh_env(data_dir: Path, **settings: str) -> dict[str, str]:
    """`clean_environment()` with no platform configured, an embedded Temporal on free ports and
    data in `data_dir`; then `settings`."""
    defaults = {
        "DATA_DIR": str(data_dir),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
        "TEMPORAL_UI_PORT": str(free_port()),
    }
    return clean_environment(**{**defaults, **settings})


def environ(pid: int) -> dict[str, str]:
    """The environment process `pid` was started with, as /proc shows it."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(
        entry.split("=", 1) for entry in raw.decode(errors="replace").split("\0") if "=" in entry
    )


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (children, their children, …), from /proc: a child that
    started its own session is still a descendant by parent pid."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # The command name may hold spaces and parentheses: the fields follow the last ")".
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # it ended while we looked
        children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


@dataclass
class RefundBotProcess:
    proc: asyncio.subprocess.Process
    args: tuple[str, ...] = ()
    stdout: str = ""
    stderr: str = ""
    _pumps: list[asyncio.Task[None]] = field(default_factory=list)
    _seen: dict[int, int | None] = field(default_factory=dict)  # pid -> its start time

    @classmethod
    async def start(cls, args: list[str], env: Mapping[str, str], cwd: Path) -> RefundBotProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "refund_bot",
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=cwd,  # no developer .env is read there
        )
        started = cls(proc, tuple(args))
        assert proc.stdout is not None and proc.stderr is not None
        started._pumps = [
            asyncio.create_task(started._pump(proc.stdout, "stdout")),
            asyncio.create_task(started._pump(proc.stderr, "stderr")),
        ]
        return started

    async def _pump(self, stream: asyncio.StreamReader, name: str) -> None:
        while chunk := await stream.read(4096):
            setattr(self, name, getattr(self, name) + chunk.decode(errors="replace"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    async def expect_many(
        self, pattern: str, count: int, timeout: float = 90.0
    ) -> list[re.Match[str]]:
        """The first `count` matches of `pattern` (multiline: ^ and $ are a line's ends) in stdout
        or stderr, once there are that many; fails early if the process exits first."""
        regex = re.compile(pattern, re.MULTILINE)

        def found() -> list[re.Match[str]] | None:
            matches = list(regex.finditer(self.output))
            if len(matches) >= count:
                return matches[:count]
            if self.proc.returncode is not None:
                raise AssertionError(
                    f"{' '.join(self.args)} exited {self.proc.returncode} before {count} x "
                    f"{pattern!r}:\n{self.output}"
                )
            return None

        try:
            return await wait_for(found, timeout=timeout, what=f"{count} x {pattern!r} in output")
        except AssertionError as err:
            raise AssertionError(f"{err}; its output:\n{self.output}") from None

    async def expect(self, pattern: str, timeout: float = 90.0) -> re.Match[str]:
        """Wait until `pattern` appears in stdout or stderr; fail early if the process exits."""
        (match,) = await self.expect_many(pattern, 1, timeout)
        return match

    def tree(self) -> set[int]:
        """Every live descendant now; remembered for stop() and close()."""
        found = descendants(self.pid)
        for pid in found:
            self._seen.setdefault(pid, started_at(pid))
        return found

    def send(self, sig: signal.Signals) -> None:
        self.tree()
        self.proc.send_signal(sig)

    async def exit_code(self, timeout: float) -> int:
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        await asyncio.gather(*self._pumps)  # everything it wrote, to its last line
        return code

    async def stop(self, sig: signal.Signals = signal.SIGINT, timeout: float = 30.0) -> int:
        """Send `sig` (Ctrl-C by default) and wait for the exit, this loop serving the fakes it
        talks to meanwhile; returns the exit status. A process that ignores it, or anything of its
        tree still alive 10 s after it exited, fails the test (and is killed by close())."""
        if self.running:
            self.send(sig)
            try:
                code = await self.exit_code(timeout)
            except TimeoutError:
                raise AssertionError(
                    f"{' '.join(self.args)} ignored {sig.name} for {timeout:.0f} s:\n{self.output}"
                ) from None
        else:
            code = await self.exit_code(timeout)
        await wait_for(
            lambda: not self._left_alive(), timeout=10, what="every process it started to end"
        )
        return code

    async def close(self) -> None:
        self.tree()
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        for pid in self._left_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pump in self._pumps:
            pump.cancel()

    def _left_alive(self) -> set[int]:
        # Only the very process seen in its tree: a pid may since belong to someone else.
        return {p for p, t in self._seen.items() if alive(p) and started_at(p) == t}

"""A real `refund-bot` command in a child process: its output read as it comes, its tree walked.

    RefundBotProcess.start(["run"], env) -> expect(pattern) -> tree() -> send(signal) -> exit_code()

Its stdin is /dev/null (not a terminal), as under a service manager. `close()` SIGKILLs whatever
of its tree is left, so a failing test leaves no server behind.
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

from tests.support import descendants, free_port
from tests.support.conditions import wait_for
from worker.lifecycle import alive, started_at

# Settings a developer's shell could bring in: dropped, so a test runs exactly what it configures.
_SETTING_PREFIXES = ("TEMPORAL_", "SLACK_", "DISCORD_", "STRIPE_", "OPENAI_", "REFUND_", "AGENT_")
_DROPPED = {
    "DATA_DIR",
    "DEMO_CUSTOMER_FOR_NEW_USERS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
}


def fresh_env(data_dir: Path, **settings: str) -> dict[str, str]:
    """This process's environment without refund-bot settings: no platform configured, embedded
    Temporal on free ports, data in `data_dir`; then `settings`."""
    inherited = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(_SETTING_PREFIXES) and name not in _DROPPED
    }
    return {
        **inherited,
        "DATA_DIR": str(data_dir),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
        "TEMPORAL_UI_PORT": str(free_port()),
        **settings,
    }


@dataclass
class RefundBotProcess:
    proc: asyncio.subprocess.Process
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
        started = cls(proc)
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
    def output(self) -> str:
        return self.stdout + self.stderr

    async def expect(self, pattern: str, timeout: float = 90.0) -> re.Match[str]:
        """Wait until `pattern` appears in stdout or stderr; fail early if the process exits."""
        regex = re.compile(pattern)

        def found() -> re.Match[str] | None:
            if (match := regex.search(self.output)) is None and self.proc.returncode is not None:
                raise AssertionError(
                    f"exited {self.proc.returncode} before {pattern!r}:\n{self.output}"
                )
            return match

        try:
            return await wait_for(found, timeout=timeout, what=f"{pattern!r} in the output")
        except AssertionError as err:
            raise AssertionError(f"{err}; its output:\n{self.output}") from None

    def tree(self) -> set[int]:
        """Every live descendant now; remembered for close()."""
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

    async def close(self) -> None:
        self.tree()
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        for pid, started in self._seen.items():
            # Only the very process seen in its tree: a pid may since belong to someone else.
            if alive(pid) and started_at(pid) == started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for pump in self._pumps:
            pump.cancel()

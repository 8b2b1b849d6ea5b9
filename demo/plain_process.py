"""The parent's handle on one plain-loop process (demo/plain_loop.py), for /refund-demo.

    PlainProcess.start -> the loop, in a process of its own tied to this one
      send(CustomerLine) -> stdin ; expect("asked") <- stdout (LoopEvent) ; kill() -> SIGKILL

A real process, so that the crash is real: its memory dies with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from agent.models import Actor, ThreadRef
from agent.settings import AgentSettings
from demo.parts import DemoFailed
from demo.plain_loop import CustomerLine, LoopEvent
from worker.lifecycle import spawn_child, terminate
from worker.settings import child_environment

# The secrets the plain loop uses (worker.settings.SECRETS names them all).
PLAIN_LOOP_SECRETS = frozenset(
    {"SLACK_BOT_TOKEN", "DISCORD_TOKEN", "STRIPE_API_KEY", "OPENAI_API_KEY", "DATABASE_URL"}
)

log = logging.getLogger(__name__)

STEP_TIMEOUT = 60.0  # the loop's next report: a decide step, a lookup, a post


class PlainProcess:
    """One plain-loop process: the customer's lines in on stdin, what it did out on stdout."""

    def __init__(self, proc: asyncio.subprocess.Process, calls: Path) -> None:
        self.proc = proc
        self.calls = calls
        self._events: asyncio.Queue[LoopEvent] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(
        cls,
        settings: AgentSettings,
        thread: ThreadRef,
        customer: Actor,
        conversation_id: str,
        order_number: str,
        *,
        calls: Path,
        log_file: Path,
        child_env: Mapping[str, str],
    ) -> PlainProcess:
        """The plain loop for `thread`, held before its refund, once it says it is ready.
        `child_env` adds to this process's environment (the Worker's: platform settings)."""
        argv = [
            sys.executable, "-m", "demo.plain_loop",
            "--thread", thread.model_dump_json(),
            "--customer", customer.model_dump_json(),
            "--conversation", conversation_id,
            "--order", order_number,
            "--calls", str(calls),
            "--hold",
        ]  # fmt: skip
        env = {
            # Only the secrets the loop uses: it posts, refunds and asks the model, and reads the
            # stores; it never talks to Temporal (no codec keys, no API key) nor to a platform's
            # inbound half.
            **child_environment(PLAIN_LOOP_SECRETS),
            **child_env,
            "DATA_DIR": str(settings.data_dir),
            "AGENT_DECIDER": settings.agent_decider,
        }
        if settings.database_url is not None:
            env["DATABASE_URL"] = settings.database_url.get_secret_value()
        with log_file.open("ab") as stderr:
            # Its own process, tied to this one: it dies with the bot, and a SIGKILL is real.
            proc = await spawn_child(
                argv,
                on_parent_death=signal.SIGKILL,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
            )
        process = cls(proc, calls)
        try:
            await process.expect("ready")
        except BaseException:  # cancelled (the story stopped) or failed: it must not outlive us
            await asyncio.shield(process.stop())
            raise
        return process

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            try:
                await self._events.put(LoopEvent.model_validate_json(line))
            except ValueError:  # not a report (a stray print): said, not acted on
                log.warning("plain loop pid %s printed %r", self.proc.pid, line[:200])

    async def send(self, line: CustomerLine) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.model_dump_json().encode() + b"\n")
        await self.proc.stdin.drain()

    async def expect(self, event: str) -> LoopEvent:
        """The loop's next report, which must be `event` (within STEP_TIMEOUT)."""
        deadline = time.monotonic() + STEP_TIMEOUT
        while (left := deadline - time.monotonic()) > 0:
            get = asyncio.ensure_future(self._events.get())
            done, _ = await asyncio.wait(
                {get, self._reader}, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            if get not in done:
                get.cancel()
                if self._reader in done:
                    code = self.proc.returncode
                    raise DemoFailed(f"the plain loop's process ended (exit {code})")
                break
            report = get.result()
            if report.event == event:
                return report
            raise DemoFailed(f"the plain loop did {report.event!r} where {event!r} was next")
        raise DemoFailed(f"the plain loop did not reach {event!r} within {STEP_TIMEOUT:.0f}s")

    async def kill(self) -> None:
        """SIGKILL: no clean shutdown, as a crash; returns once it is dead."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        await asyncio.wait_for(self.proc.wait(), STEP_TIMEOUT)

    async def stop(self) -> None:
        await terminate(self.proc, 5.0)
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)

"""A child process on a pseudo-terminal, for the tests of what a person sees in one.

    Terminal(argv) -> type(line) -> expect(pattern): the screen so far, read with a deadline

Used by the local channel's terminal tests and the tracing test of `refund-bot run`.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time


class Terminal:
    """A child process on a pseudo-terminal: type into it, read its screen."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, close_fds=True
        )
        os.close(slave)
        self.screen = ""

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def expect(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """Wait (with a deadline) until `pattern` appears in what was printed since the start."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while (match := regex.search(self.screen)) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.proc.poll() is not None:
                raise AssertionError(f"{pattern!r} never appeared; the screen:\n{self.screen}")
            ready, _, _ = select.select([self.master], [], [], min(remaining, 0.5))
            if ready:
                try:
                    self.screen += os.read(self.master, 65536).decode(errors="replace")
                except OSError:  # the child closed the terminal
                    continue
        return match

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self.master)

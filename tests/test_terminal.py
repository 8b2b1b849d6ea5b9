"""`refund-bot run` in a real terminal (a pty): the local support channel end to end."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

from harness import free_port


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


def test_local_channel_in_a_real_terminal(tmp_path) -> None:
    env = {
        **os.environ,
        "DATA_DIR": str(tmp_path / ".data"),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
        "TEMPORAL_UI_PORT": str(free_port()),
        "SLACK_BOT_TOKEN": "",
        "DISCORD_TOKEN": "",
        "STRIPE_API_KEY": "",
        "REFUND_HOLD_BEFORE_REFUND": "false",
    }
    term = Terminal([sys.executable, "-m", "refund_bot", "run"], env, str(tmp_path))
    try:
        term.expect(r"Temporal Web UI: http://127\.0\.0\.1:\d+")
        term.expect(r"Try: please refund order 1234")
        term.type("please refund order 1234")
        term.expect(r"\[t1\] refund-bot: Was the package opened\?")
        term.type("Yes")
        term.expect(r"\[t1\] refund-bot: What was damaged\?")

        term.type("/as presenter")
        term.type("/crash-worker")
        crash = term.expect(r"old pid (\d+), new pid (\d+), ready in [\d.]+s")
        assert crash.group(1) != crash.group(2)

        term.type("/as customer")
        term.type("Split seam")
        term.expect(r"\[t1\] refund-bot: Your refund is complete")
        term.type("/as presenter")
        term.type("/refund-status")
        term.expect(
            r"refund at the offline ledger: re_ledger_\w+ succeeded \$80\.00 "
            r"\(calls with its key: 1\)"
        )
        term.type("/quit")
        assert term.proc.wait(timeout=60) == 0
    finally:
        term.close()
    # Each question once on the screen: none asked twice across the crash.
    assert term.screen.count("refund-bot: Was the package opened?") == 1
    assert term.screen.count("refund-bot: What was damaged?") == 1
    assert term.screen.count("Your refund is complete") == 1

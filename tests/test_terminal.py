"""`refund-bot run` in a real terminal (a pty): the local support channel end to end."""

from __future__ import annotations

import os
import sys

from harness import free_port
from tests.support.terminal import Terminal


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

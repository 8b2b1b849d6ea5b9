"""The terminal channel's first five minutes, in a real terminal (a pty) across a full restart.

Threads count 1, 2, 3; a finished thread says how to start a new one; /thread refuses a thread
that does not exist; /refund-grant refuses someone who is not here; replies show no chat markup;
after a restart /threads tells the threads apart and says which are still open.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness import free_port
from harness.cli_process import clean_environment
from tests.support.terminal import Terminal


def _run(env: dict[str, str], cwd: Path) -> Terminal:
    return Terminal([sys.executable, "-m", "refund_bot", "run"], env, str(cwd))


def test_threads_notices_and_people_in_a_real_terminal(tmp_path: Path) -> None:
    env = {
        **clean_environment(),
        "DATA_DIR": str(tmp_path / ".data"),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
        "TEMPORAL_UI_PORT": str(free_port()),
    }
    term = _run(env, tmp_path)
    try:
        term.expect(r"Try: please refund order 1234")
        assert "earlier thread" not in term.screen  # a fresh data directory has none
        term.type("please refund order 1234")
        term.expect(r"\[t1\] refund-bot: Was the package opened\?")
        term.type("Yes")
        term.expect(r"\[t1\] refund-bot: What was damaged\?")
        term.type("Split seam")
        term.expect(r"\[t1\] refund-bot: Your refund is complete")
        term.expect(r"\[t1\] \(finished: /new starts another thread\)")
        term.type("thanks!")
        # The terminal's notice once the conversation has ended; the conversation's own answer
        # when "thanks!" reached it while it was posting its outcome.
        term.expect(r"\[t1\] refund-bot( \(notice\))?: This conversation has finished\.")

        term.type("/new")
        term.type("please refund order 4500")
        term.expect(r"\[t2\] Nyghtowl \(customer\) opened a thread: please refund order 4500")
        term.expect(r"\[t2\] refund-bot: Was the package opened\?")
        term.type("/thread t99")
        term.expect(r"! no thread t99; /threads lists them")

        term.type("/as presenter")
        term.type("/refund-grant @nobody refund_approver 500")
        term.expect(r"! no one here is called @nobody: one of @customer, @support")
        term.type("/refund-status t1")
        term.expect(r"local-local-support-t1  \(read from Temporal's Event History just now")
        term.type("/quit")
        assert term.proc.wait(timeout=60) == 0
    finally:
        term.close()
    assert "*local-local-support-t1*" not in term.screen  # chat markup, shown plain

    # A full restart: the names are all a person has to go on.
    term = _run({**env, "TEMPORAL_UI_PORT": str(free_port())}, tmp_path)
    try:
        term.expect(r"2 earlier threads: /threads lists them, /thread t2 enters one\.")
        term.type("/threads")
        term.expect(r"t1\s+finished\s+please refund order 1234")
        term.expect(r"t2\s+open\s+please refund order 4500")
        term.type("/thread t2")
        term.expect(r"In thread t2\.")
        term.type("Yes")
        term.expect(r"\[t2\] refund-bot: What was damaged\?")
        term.type("/quit")
        assert term.proc.wait(timeout=60) == 0
    finally:
        term.close()

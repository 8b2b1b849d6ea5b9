"""The test PostgreSQL server's keeper: runs postgres as another user, and stops it with us.

    pytest -> spawn_child(keeper, parent-death SIGTERM) -> postgres (as `nobody` under root)
    SIGTERM, SIGINT or SIGHUP to the keeper (a normal stop, or pytest gone) -> SIGINT to postgres
    SIGUSR1 -> SIGINT to postgres, the data kept ... SIGUSR2 -> postgres again on the same data
    postgres gone (not by SIGUSR1) -> the session's directory (ROOT) removed, even when pytest
        could not do it

The kernel's parent-death signal does not survive a change of user followed by exec (it is
cleared), so a postgres started as `nobody` from a root pytest could not be tied to pytest's life
directly. The keeper keeps pytest's user: the tie holds for it, and it passes the stop on. The
chaos drill (harness/chaos) stops and starts the database through it, as an operator restarts one.

    python harness/pg_keeper.py UID GID ROOT -- postgres ARGS…   (UID -1: the keeper's own)
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import TypedDict


class RunAs(TypedDict, total=False):
    """subprocess's keywords that run the child as another user."""

    user: int
    group: int
    extra_groups: list[int]


def main(argv: list[str]) -> int:
    uid, gid, root, separator, *command = argv
    assert separator == "--" and command, __doc__
    servers: list[subprocess.Popen[bytes]] = []
    stopping: list[int] = []
    down: list[int] = []  # SIGUSR1 received and not yet answered by SIGUSR2
    taken_down: list[int] = []  # SIGUSR1 received since the server last started

    def fast_shutdown() -> None:
        for server in servers:
            if server.poll() is None:
                # PostgreSQL's fast shutdown: clients disconnected, the data left consistent.
                server.send_signal(signal.SIGINT)

    def stop(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)
        fast_shutdown()

    def take_down(signum: int, _frame: FrameType | None) -> None:
        down.append(signum)
        taken_down.append(signum)
        fast_shutdown()

    def bring_up(_signum: int, _frame: FrameType | None) -> None:
        down.clear()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    signal.signal(signal.SIGUSR1, take_down)
    signal.signal(signal.SIGUSR2, bring_up)
    identity: RunAs = {}
    if int(uid) >= 0:
        identity = {"user": int(uid), "group": int(gid), "extra_groups": []}
    try:
        while True:
            taken_down.clear()
            # cwd "/": the checkout may be a directory the server's user cannot enter.
            servers.append(subprocess.Popen(command, cwd="/", **identity))
            if stopping or down:  # a signal that came while it was starting
                fast_shutdown()
            code = servers[-1].wait()
            if stopping or not taken_down:
                return code  # stopped, or it ended by itself
            while down and not stopping:
                time.sleep(0.05)  # taken down on purpose: SIGUSR2 starts it again
            if stopping:
                return code
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

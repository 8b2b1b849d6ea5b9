"""The test PostgreSQL server's keeper: runs postgres as another user, and stops it with us.

    pytest -> spawn_child(keeper, parent-death SIGTERM) -> postgres (as `nobody` under root)
    SIGTERM, SIGINT or SIGHUP to the keeper (a normal stop, or pytest gone) -> SIGINT to postgres
    postgres gone -> the session's directory (ROOT) removed, even when pytest could not do it

The kernel's parent-death signal does not survive a change of user followed by exec (it is
cleared), so a postgres started as `nobody` from a root pytest could not be tied to pytest's life
directly. The keeper keeps pytest's user: the tie holds for it, and it passes the stop on.

    python harness/pg_keeper.py UID GID ROOT -- postgres ARGS…   (UID -1: the keeper's own)
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
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

    def stop(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)
        for server in servers:
            if server.poll() is None:
                # PostgreSQL's fast shutdown: clients disconnected, the data left consistent.
                server.send_signal(signal.SIGINT)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    identity: RunAs = {}
    if int(uid) >= 0:
        identity = {"user": int(uid), "group": int(gid), "extra_groups": []}
    # cwd "/": the checkout may be a directory the server's user cannot enter.
    servers.append(subprocess.Popen(command, cwd="/", **identity))
    if stopping:  # a stop that came while it was starting
        stop(stopping[0], None)
    try:
        return servers[0].wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

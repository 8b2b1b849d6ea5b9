"""A parent that ties one child to its life by one mechanism only, for the lifecycle tests.

    python -m tests.support.tied_parent lifeline    a Python child that only watches the lifeline
    python -m tests.support.tied_parent pdeathsig   `sleep` tied only by PR_SET_PDEATHSIG

It prints "child pid N" once the child is tied, then waits for the test to SIGKILL it.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from worker.lifecycle import spawn_child, watch_lifeline

CHILD = [sys.executable, "-m", "tests.support.tied_parent", "child"]


async def parent(mode: str) -> None:
    if mode == "lifeline":
        child = await spawn_child(
            CHILD, on_parent_death=None, lifeline=True, stdout=asyncio.subprocess.PIPE
        )
        assert child.stdout is not None
        assert await child.stdout.readline() == b"watching\n"
    else:
        child = await spawn_child(["sleep", "600"], on_parent_death=signal.SIGTERM)
    print(f"child pid {child.pid}", flush=True)
    await asyncio.Event().wait()


async def lifeline_child() -> None:
    assert watch_lifeline(), "started without a lifeline"
    print("watching", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    role = sys.argv[1]
    asyncio.run(lifeline_child() if role == "child" else parent(role))

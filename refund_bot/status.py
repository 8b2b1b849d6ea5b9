"""The status line of `refund-bot run` and `refund-bot bot`: printed once at start, then logged
every minute at debug level.

    the stack (Temporal, Worker, inbox) + each platform's PlatformHealth -> status_line()

For example (one line each):
    status: Temporal 127.0.0.1:7233 (embedded, pid 4242) | Worker pid 4250 polling 'refund-bot',
    standby pid 4251 | slack connected, discord retrying for 42s (gateway refused) | inbox 0 waiting
    status: Temporal temporal.internal:7233 (external) | 2 Worker(s) polling 'refund-bot'
    (worker-a, worker-b) | slack connected, discord standby (gateway held by pid 4242 on bot-1) |
    inbox 0 waiting
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence

from bot.platform_health import PlatformHealth
from refund_bot.stack import Stack
from worker.pollers import other_workers

log = logging.getLogger(__name__)

STATUS_EVERY = 60.0  # seconds between two status lines in the log
# At start the line waits (at most this long) for each platform's first connection attempt.
FIRST_STATUS_WAIT = 5.0


def say(text: str) -> None:
    """A line to stdout; a terminal already closed (SIGHUP) loses it, and nothing else happens."""
    with contextlib.suppress(OSError, ValueError):
        print(text, flush=True)


def _temporal(stack: Stack) -> str:
    if stack.server is None:
        return f"Temporal {stack.temporal.address} (external)"
    return f"Temporal {stack.server.address} ({stack.server.origin})"


async def _workers_elsewhere(stack: Stack) -> str:
    """`refund-bot bot`: the Workers alive on the task queue (their heartbeats to Temporal),
    wherever they run."""
    t = stack.temporal
    try:
        workers = await other_workers(stack.client, t.namespace, t.task_queue, this_host=stack.host)
    except Exception as err:
        return f"Workers unknown ({err})"
    hosts = sorted({w.host or w.identity for w in workers})
    where = f" ({', '.join(hosts)})" if hosts else ""
    return f"{len(workers)} Worker(s) polling {t.task_queue!r}{where}"


async def _worker(stack: Stack) -> str:
    supervisor = stack.supervisor
    if supervisor is None:
        return await _workers_elsewhere(stack)
    pids = supervisor.pids
    if not pids:
        return "no Worker"
    named = f"Worker pid{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids))}"
    if not supervisor.running:
        return f"{named}: a Worker exited (the supervisor restarts it)"
    try:
        polling = await supervisor.polling()
    except Exception as err:  # Temporal unreachable: say so, the line still goes out
        return f"{named} (polling unknown: {err})"
    line = f"{named} {'polling' if polling else 'not polling'} {supervisor.settings.task_queue!r}"
    standby = supervisor.standby_pid
    return f"{line}, standby pid {standby}" if standby is not None else f"{line}, no standby"


async def _inbox(stack: Stack) -> str:
    try:
        return f"inbox {await stack.inbox.depth()}"
    except Exception as err:
        return f"inbox unreadable ({err})"


async def status_line(stack: Stack, platforms: Sequence[PlatformHealth]) -> str:
    chat = ", ".join(health.summary() for health in platforms) or "no chat platform"
    parts = [_temporal(stack), await _worker(stack), chat, await _inbox(stack)]
    if stack.ops:
        parts.append(stack.ops)
    return "status: " + " | ".join(parts)


async def first_status(stack: Stack, platforms: Sequence[PlatformHealth]) -> str:
    """The start-up line, once every platform has left "starting" (or FIRST_STATUS_WAIT passed)."""
    deadline = time.monotonic() + FIRST_STATUS_WAIT
    while any(h.state == "starting" for h in platforms):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)  # PlatformHealth has no event to wait on: it is polled
    return await status_line(stack, platforms)


async def log_status_every(
    stack: Stack, platforms: Sequence[PlatformHealth], every: float = STATUS_EVERY
) -> None:
    """Background task: the status line at debug level every `every` seconds, until cancelled."""
    while True:
        await asyncio.sleep(every)
        try:
            log.debug("%s", await status_line(stack, platforms))
        except Exception:  # a status line must never stop the run
            log.exception("Could not build the status line")

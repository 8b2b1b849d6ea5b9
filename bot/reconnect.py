"""Keep one chat platform connected: the retry loop every adapter's `serve` runs in.

    serve -> keep_connected(health, connect) -> connect() ... fails -> one line, health retrying
          -> wait (capped exponential backoff) -> connect() again ... refused -> one line, down

`connect` is the adapter's own: it connects, calls `health.connected()` once it is up, and keeps
the connection until it ends. A failure is logged as one line (never a traceback: an outage is
not a bug) and retried after a delay that doubles up to a cap. `Refused` is a failure retrying
cannot mend (a credential the platform turns down, a port that cannot be bound): one line, the
platform shown down, no more attempts until the process is restarted with a better setting.

keep_connected never raises into the stack and never returns: a platform that is down waits there,
so the Worker, the router and every other platform carry on. Only cancellation ends it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.platform_health import PlatformHealth

log = logging.getLogger(__name__)

# One line of log or status detail, never a page of it.
MAX_DETAIL = 200


class Refused(Exception):
    """The platform refused something only a person can fix (a token, a port): do not retry."""


class ConnectionLost(Exception):
    """A connection that was up has gone; the loop connects again."""


@dataclass(frozen=True)
class Backoff:
    """Delays between attempts: `first`, doubling per failure, never more than `cap` seconds.

    A connection that stayed up for `stable_after` seconds starts the doubling over, so a platform
    that drops once a day reconnects at once, and one that flaps waits longer each time.
    """

    first: float = 1.0
    cap: float = 60.0
    stable_after: float = 60.0
    jitter: bool = True  # up to half of each delay is random, so replicas do not retry in step

    def delay(self, failures: int) -> float:
        """The wait after the `failures`-th consecutive failure (1 for the first)."""
        full = min(self.cap, self.first * 2 ** max(0, failures - 1))
        return full * random.uniform(0.5, 1.0) if self.jitter else full


DEFAULT_BACKOFF = Backoff()


def one_line(err: BaseException) -> str:
    """`ClientConnectorError: Cannot connect to host …`: the first line of an error, bounded."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    detail = f"{type(err).__name__}: {text}" if text else type(err).__name__
    return detail if len(detail) <= MAX_DETAIL else detail[: MAX_DETAIL - 1] + "…"


async def keep_connected(
    health: PlatformHealth,
    connect: Callable[[], Awaitable[None]],
    *,
    backoff: Backoff = DEFAULT_BACKOFF,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Run `connect` for ever: retry what fails with backoff, stop trying on `Refused`.

    Returns only by cancellation; a refused platform stays down (and this task waits) until then.
    """
    failures = 0
    while True:
        try:
            await connect()
            raise ConnectionLost("the connection ended")
        except Refused as err:
            log.error("%s is down: %s", health.name, err)
            health.down(str(err))
            break
        except Exception as err:
            was_stable = (
                health.state == "connected" and time.time() - health.since >= backoff.stable_after
            )
            failures = 1 if was_stable else failures + 1
            why = one_line(err)
            health.retrying(why)
            delay = backoff.delay(failures)
            log.warning("%s: %s; retrying in %.3gs", health.name, why, delay)
            await sleep(delay)
    await asyncio.Event().wait()  # until cancelled: no retry can mend a refusal

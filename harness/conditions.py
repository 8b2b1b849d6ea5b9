"""Waiting on a condition with a deadline: the tests' only way to wait for state.

Each wait that is met is kept with how much of its deadline it used: the suite's summary names
those that came close (close_calls), because a slower or busier machine fails them first.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

T = TypeVar("T")

# A wait that used this share of its deadline or more is named in the suite's summary.
CLOSE_CALL = 0.5


@dataclass(frozen=True)
class MetWait:
    what: str
    took: float
    deadline: float
    test: str  # pytest's name for the test that waited, "" outside one

    @property
    def share(self) -> float:
        return self.took / self.deadline


MET: list[MetWait] = []  # every wait met in this process


def close_calls(waits: Iterable[MetWait], at_least: float = CLOSE_CALL) -> list[str]:
    """The waits that used `at_least` of their deadline or more, closest first, one line each."""
    close = sorted((w for w in waits if w.share >= at_least), key=lambda w: w.share, reverse=True)
    return [
        f"{w.share:4.0%}  {w.took:6.2f} s of {w.deadline:g} s  {w.what}  ({w.test})" for w in close
    ]


# What it returns is truthy, so never None: a probe of `X | None` gives an X.
@overload
async def wait_for(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = ...,
    interval: float = ...,
    what: str = ...,
) -> T: ...


@overload
async def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float = ...,
    interval: float = ...,
    what: str = ...,
) -> T: ...


async def wait_for(
    probe: Callable[[], Any],
    *,
    timeout: float = 20.0,
    interval: float = 0.05,
    what: str = "condition",
) -> Any:
    """Call `probe` (sync or async) until it returns something truthy; fail with `what` after
    `timeout` seconds."""
    started = time.monotonic()
    deadline = started + timeout
    last: Any = None
    while time.monotonic() < deadline:
        result = probe()
        last = await result if inspect.isawaitable(result) else result
        if last:
            test = os.environ.get("PYTEST_CURRENT_TEST", "").removesuffix(" (call)")
            MET.append(MetWait(what, time.monotonic() - started, timeout, test))
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")

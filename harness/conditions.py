"""Waiting on a condition with a deadline: the tests' only way to wait for state."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def wait_for(
    probe: Callable[[], Awaitable[T] | T],
    *,
    timeout: float = 20.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Call `probe` (sync or async) until it returns something truthy; fail with `what` after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        result = probe()
        last = await result if inspect.isawaitable(result) else result
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")

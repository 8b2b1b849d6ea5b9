"""Waiting on a condition with a deadline: the tests' only way to wait for state."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


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
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        result = probe()
        last = await result if inspect.isawaitable(result) else result
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")

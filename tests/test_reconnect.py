"""bot.reconnect: the one retry loop both platforms run in (no network: the connect is a fake)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import pytest

from bot.platform_health import PlatformHealth
from bot.reconnect import Backoff, Refused, keep_connected, one_line
from harness.conditions import wait_for


class Sleeps:
    """Stands in for asyncio.sleep: records each delay and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


class ScriptedConnect:
    """A connect function playing `steps` in turn; after the last, it stays connected. `calls`
    counts the attempts."""

    def __init__(
        self, steps: tuple[Callable[[PlatformHealth], Awaitable[None]], ...], health: PlatformHealth
    ) -> None:
        self.steps, self.health = steps, health
        self.calls: list[int] = []

    async def __call__(self) -> None:
        calls, steps = self.calls, self.steps
        calls.append(len(calls))
        if len(calls) <= len(steps):
            await steps[len(calls) - 1](self.health)
            return
        self.health.connected()
        await asyncio.Event().wait()


def scripted(
    *steps: Callable[[PlatformHealth], Awaitable[None]],
) -> Callable[[PlatformHealth], ScriptedConnect]:
    """A connect function playing `steps` in turn; after the last, it stays connected."""
    return lambda health: ScriptedConnect(steps, health)


async def unreachable(_: PlatformHealth) -> None:
    raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 9)")


def test_backoff_doubles_up_to_its_cap() -> None:
    plain = Backoff(first=1, cap=8, jitter=False)
    assert [plain.delay(n) for n in range(1, 7)] == [1, 2, 4, 8, 8, 8]
    jittered = Backoff(first=1, cap=8)
    for n, full in zip(range(1, 7), [1, 2, 4, 8, 8, 8], strict=True):
        assert full / 2 <= jittered.delay(n) <= full


async def test_each_failure_is_one_line_then_a_longer_wait(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="bot.reconnect")
    health = PlatformHealth("discord")
    sleeps = Sleeps()
    connect = scripted(unreachable, unreachable, unreachable)(health)
    backoff = Backoff(first=1, cap=3, jitter=False)
    task = asyncio.create_task(keep_connected(health, connect, backoff=backoff, sleep=sleeps))
    try:
        await wait_for(lambda: health.ok, what="connected on the fourth attempt")
    finally:
        task.cancel()
    assert sleeps.delays == [1, 2, 3]
    lines = [r for r in caplog.records if r.name == "bot.reconnect"]
    assert [r.levelno for r in lines] == [logging.WARNING] * 3
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in lines)
    assert lines[0].getMessage() == (
        "discord: ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', 9); "
        "retrying in 1s"
    )
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_health_says_retrying_with_the_reason_until_connected() -> None:
    health = PlatformHealth("slack")
    release = asyncio.Event()

    async def down_until_released(_: PlatformHealth) -> None:
        raise OSError("network is unreachable")

    async def wait(seconds: float) -> None:
        await release.wait()

    connect = scripted(down_until_released)(health)
    task = asyncio.create_task(keep_connected(health, connect, sleep=wait))
    try:
        await wait_for(lambda: health.state == "retrying", what="retrying")
        assert health.detail == "OSError: network is unreachable" and health.failures == 1
        assert health.summary(now=health.since + 42) == (
            "slack retrying for 42s (OSError: network is unreachable)"
        )
        release.set()
        await wait_for(lambda: health.ok, what="connected")
        assert health.failures == 0
    finally:
        task.cancel()


async def test_a_refusal_is_one_line_down_and_never_retried(caplog) -> None:
    health = PlatformHealth("slack")
    sleeps = Sleeps()

    async def refused(_: PlatformHealth) -> None:
        raise Refused("Slack refused SLACK_APP_TOKEN (apps.connections.open: invalid_auth)")

    connect = scripted(refused)(health)
    task = asyncio.create_task(keep_connected(health, connect, sleep=sleeps))
    try:
        await wait_for(lambda: health.state == "down", what="down")
        for _ in range(10):  # give a retry every chance to happen
            await asyncio.sleep(0)
        assert connect.calls == [0] and sleeps.delays == []
        assert not task.done()  # it waits, so `refund-bot run` keeps running
        assert health.detail.startswith("Slack refused SLACK_APP_TOKEN")
        [line] = [r for r in caplog.records if r.name == "bot.reconnect"]
        assert line.levelno == logging.ERROR and line.exc_info is None
        assert line.getMessage() == f"slack is down: {health.detail}"
    finally:
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_connection_that_stayed_up_starts_the_doubling_over() -> None:
    health = PlatformHealth("discord")
    sleeps = Sleeps()

    async def up_long_then_dropped(h: PlatformHealth) -> None:
        h.connected()
        h.since = time.time() - 120  # up for two minutes
        raise ConnectionResetError("Connection reset by peer")

    async def up_briefly_then_dropped(h: PlatformHealth) -> None:
        h.connected()
        raise ConnectionResetError("Connection reset by peer")

    connect = scripted(
        unreachable, unreachable, up_long_then_dropped, unreachable, up_briefly_then_dropped
    )(health)
    backoff = Backoff(first=1, cap=60, stable_after=60, jitter=False)
    task = asyncio.create_task(keep_connected(health, connect, backoff=backoff, sleep=sleeps))
    try:
        await wait_for(lambda: len(sleeps.delays) == 5, what="five failures")
    finally:
        task.cancel()
    # A flapping connection keeps doubling; one that was stable starts again at `first`.
    assert sleeps.delays == [1, 2, 1, 2, 4]


async def test_a_connection_that_just_ends_is_made_again() -> None:
    health = PlatformHealth("discord")
    sleeps = Sleeps()

    async def ends(_: PlatformHealth) -> None:
        return

    connect = scripted(ends)(health)
    task = asyncio.create_task(keep_connected(health, connect, sleep=sleeps))
    try:
        await wait_for(lambda: health.ok, what="connected again")
    finally:
        task.cancel()
    assert connect.calls == [0, 1] and len(sleeps.delays) == 1


def test_one_line_keeps_the_first_line_and_bounds_it() -> None:
    assert one_line(ValueError("first\nsecond")) == "ValueError: first"
    assert one_line(TimeoutError()) == "TimeoutError"
    long = one_line(RuntimeError("x" * 500))
    assert len(long) == 200 and long.endswith("…")

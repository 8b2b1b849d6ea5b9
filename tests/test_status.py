"""`refund-bot run`'s status line, built from the running stack and each platform's health."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from bot.platform_health import PlatformHealth
from harness.conditions import wait_for
from harness.stack import supervised_stack
from refund_bot.status import log_status_every, status_line


async def test_the_status_line_says_where_everything_stands_and_is_logged_on_a_period(
    temporal_env: WorkflowEnvironment, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    slack, discord = PlatformHealth("slack"), PlatformHealth("discord")
    slack.connected()
    discord.retrying("gateway refused")
    async with supervised_stack(temporal_env, tmp_path) as stack:
        supervisor, server = stack.supervisor, stack.server
        assert supervisor is not None and server is not None  # supervised_stack's
        line = await status_line(stack, [slack, discord])
        address = re.escape(server.address)
        assert re.fullmatch(
            rf"status: Temporal {address} \(reused: not started by refund-bot for this data "
            r"directory\)"
            rf" \| Worker pid {supervisor.pid} polling '{stack.temporal.task_queue}',"
            rf" standby pid {supervisor.standby_pid}"
            r" \| slack connected, discord retrying for \d+s \(gateway refused\)"
            r" \| inbox 0 waiting",
            line,
        ), line

        caplog.set_level(logging.DEBUG, logger="refund_bot.status")
        reporter = asyncio.create_task(log_status_every(stack, [slack, discord], every=0.2))
        try:

            def logged() -> list[logging.LogRecord]:
                return [
                    r
                    for r in caplog.records
                    if r.name == "refund_bot.status" and r.getMessage().startswith("status: ")
                ]

            records = await wait_for(
                lambda: logged() if len(logged()) >= 2 else None, what="two lines"
            )
            assert all(r.levelno == logging.DEBUG for r in records)
        finally:
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporter

        # The Worker gone: the line says so instead of failing.
        await supervisor.stop()
        assert " | no Worker | " in await status_line(stack, [])

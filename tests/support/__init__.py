"""Helpers for tests that run real processes (to wait on state: tests.support.conditions; to run a
`refund-bot` command: tests.support.cli_process; whether a pid runs: worker.lifecycle.alive)."""

from __future__ import annotations

import asyncio
import socket
import uuid

from temporalio.client import Client

from agent.settings import TemporalSettings

# For a child process's environment: slack_sdk then goes straight to a local fake (it takes an
# empty value as no proxy; aiohttp reads none unless told to).
NO_PROXY = {name: "" for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")}


async def port_accepts(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:`port` now."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def queue_settings(client: Client, prefix: str) -> TemporalSettings:
    """Settings on the server `client` talks to, with task queues of their own (`prefix`-…), so
    a test's Workers and supervisors meet no other test's."""
    suffix = uuid.uuid4().hex[:8]
    return TemporalSettings(
        _env_file=None,  # type: ignore[call-arg]
        address=client.service_client.config.target_host,
        namespace=client.namespace,
        task_queue=f"{prefix}-{suffix}",
        control_task_queue=f"{prefix}-{suffix}-control",
        embedded=False,
    )

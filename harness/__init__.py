"""The harness the tests and the benchmarks share: neither's, both import it.

    fakes/ (each platform and API at its network edge) + a dev server (dev_server) + stores and
    orders (owner, postgres) + a conversation driver (conversation, crowd) + whole stacks (stack,
    inproc, cli_process, kill_drill) + waiting on state (conditions)

This module: ports and proxies for real child processes.
"""

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
        _env_file=None,
        address=client.service_client.config.target_host,
        namespace=client.namespace,
        task_queue=f"{prefix}-{suffix}",
        control_task_queue=f"{prefix}-{suffix}-control",
        embedded=False,
    )

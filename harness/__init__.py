"""The harness the tests and the benchmarks share: neither's, both import it.

    fakes/ (each platform and API at its network edge) + a dev server (dev_server) + stores and
    orders (owner, postgres) + a conversation driver (conversation, crowd) + whole stacks (stack,
    inproc, cli_process, kill_drill) + waiting on state (conditions)

This module: ports and proxies for real child processes.
"""

from __future__ import annotations

import asyncio
import os
import random
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


# Ports handed out below Linux's ephemeral range (32768 and up), so that no process's outgoing
# connection can take one between free_port() and the child's bind; each pytest-xdist worker has
# a band of its own, so two of them never hand out the same one.
_BAND = 2500
_handed_out: set[int] = set()


def free_port() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    low = 10000 + (int(worker) % 8 if worker.isdigit() else 0) * _BAND
    while True:
        port = random.randrange(low, low + _BAND)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port


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

"""The benchmarks' Temporal: the dev server `refund-bot run` embeds, on free ports.

    async with embedded_server(data_dir) as server -> server.address, server.pid (for /proc)

The same command line refund-bot runs (`temporal server start-dev`, its SQLite database in a file
in the data directory), so a benchmark measures the server a default deployment has, and its
process can be read from /proc like the Workers'.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agent.settings import TemporalSettings
from harness import free_port
from worker.server import EmbeddedTemporal


@asynccontextmanager
async def embedded_server(data_dir: Path) -> AsyncIterator[EmbeddedTemporal]:
    settings = TemporalSettings(
        _env_file=None,
        address=f"127.0.0.1:{free_port()}",
        ui_port=free_port(),
    )
    async with EmbeddedTemporal(settings, data_dir) as server:
        assert server.pid is not None, "a server already answered on a free port"
        yield server

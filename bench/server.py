"""The benchmarks' Temporal: the dev server `refund-bot run` embeds, on free ports.

    async with embedded_server(data_dir) as server -> server.address, server.pid (for /proc)
    async with embedded_server(data_dir, tuned=False) -> the same server with Temporal's default
        dynamic config (no history.transferProcessorMaxPollRPS): what Temporal Cloud and most
        clusters run, for the figures a deployment off the embedded server sees

The same command line refund-bot runs (`temporal server start-dev`, its SQLite database in a file
in the data directory), so a benchmark measures the server a default deployment has, and its
process can be read from /proc like the Workers'.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from pydantic import ValidationError

from agent.settings import TemporalSettings
from harness import free_port
from worker.server import EmbeddedTemporal, dynamic_config_args

# The two server configurations a benchmark can name (--server).
SERVERS = ("embedded", "default")


class _DefaultConfigTemporal(EmbeddedTemporal):
    """The embedded server's command line without its dynamic config values."""

    def command(self) -> list[str]:
        tuned = dynamic_config_args()
        command = super().command()
        for i in range(len(command) - len(tuned) + 1):
            if command[i : i + len(tuned)] == tuned:
                return command[:i] + command[i + len(tuned) :]
        raise AssertionError(f"{tuned} not found in the server's command line")


def go_size(value: str) -> str | None:
    """A server memory limit as TEMPORAL_SERVER_MEMORY_LIMIT takes it, for a benchmark's
    `--server-memory` (argparse says why a value is refused)."""
    try:
        return TemporalSettings(_env_file=None, server_memory_limit=value).server_memory_limit
    except ValidationError as error:
        raise argparse.ArgumentTypeError(error.errors()[0]["msg"]) from None


def free_ports(
    queue: str = TemporalSettings.model_fields["task_queue"].default,
) -> TemporalSettings:
    """Temporal settings for a server of the benchmark's own, on free ports, and its queues."""
    return TemporalSettings(
        _env_file=None,
        address=f"127.0.0.1:{free_port()}",
        ui_port=free_port(),
        task_queue=queue,
        control_task_queue=f"{queue}-control",
    )


@asynccontextmanager
async def embedded_server(data_dir: Path, *, tuned: bool = True) -> AsyncIterator[EmbeddedTemporal]:
    settings = free_ports()
    kind = EmbeddedTemporal if tuned else _DefaultConfigTemporal
    async with kind(settings, data_dir) as server:
        assert server.pid is not None, "a server already answered on a free port"
        yield server

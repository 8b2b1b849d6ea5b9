"""The embedded Temporal dev server: started when nothing answers, reused when something does."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sqlite3
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client, WorkflowExecutionStatus

from agent.settings import TemporalSettings
from agent.temporal_client import connect
from harness import free_port
from harness.cli_process import environ
from harness.conditions import wait_for
from harness.dev_server import dev_server_pid, start_dev_server
from worker.lifecycle import alive
from worker.server import (
    EmbeddedTemporal,
    TemporalServerError,
    temporal_answers,
    temporal_cli_path,
)


def local_settings(
    port: int | None = None, *, embedded: bool = True, **more: Any
) -> TemporalSettings:
    return TemporalSettings(
        _env_file=None,
        address=f"127.0.0.1:{port or free_port()}",
        namespace="default",
        ui_port=free_port(),
        embedded=embedded,
        **more,
    )


async def namespace_retention(settings: TemporalSettings) -> timedelta:
    client = await Client.connect(settings.address)
    described = await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace=settings.namespace)
    )
    return described.config.workflow_execution_retention_ttl.ToTimedelta()


async def test_start_reuse_stop_and_persist(tmp_path: Path) -> None:
    codec_server = "http://127.0.0.1:8081"
    settings = local_settings(
        retention_days=3, ui_codec_endpoint=codec_server, server_memory_limit="256MiB"
    )
    first = EmbeddedTemporal(settings, tmp_path)
    async with first:
        assert first.started
        pid = first.pid
        assert pid is not None
        # Its memory limit, in the environment Go's runtime reads it from.
        assert environ(pid)["GOMEMLIMIT"] == "256MiB"
        assert first.db_path.exists()
        # Write-ahead logging, kept in the file itself: what any connection to it reports.
        with contextlib.closing(sqlite3.connect(first.db_path)) as db:
            assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert first.ui_url == f"http://127.0.0.1:{settings.ui_port}"
        assert await temporal_answers(settings.address)
        # The history retention setting, as the namespace itself reports it.
        assert await namespace_retention(settings) == timedelta(days=3)

        # The Web UI decodes payloads through the codec server it was pointed at.
        async def ui_settings() -> dict | None:
            try:
                async with (
                    aiohttp.ClientSession() as http,
                    http.get(f"{first.ui_url}/api/v1/settings") as response,
                ):
                    return await response.json() if response.status == 200 else None
            except aiohttp.ClientError:
                return None

        ui = await wait_for(ui_settings, timeout=30, what="the Web UI's settings")
        assert ui["Codec"]["Endpoint"] == codec_server

        async with EmbeddedTemporal(settings, tmp_path / "unused") as second:
            assert not second.started
        # Leaving the reusing one must not stop the server it did not start.
        assert await temporal_answers(settings.address)
        assert alive(pid)

        # An open conversation: a workflow started with no Worker stays Running.
        client = await connect(settings)
        await client.start_workflow("NoSuchWorkflow", id="survives-restart", task_queue="nobody")

    async def stopped() -> bool:
        return not alive(pid) and not await temporal_answers(settings.address, 0.5)

    await wait_for(stopped, timeout=15, what="the started server to stop")

    # A full restart on the same data dir finds the conversation where it stood.
    async with EmbeddedTemporal(settings, tmp_path) as again:
        assert again.started
        client = await connect(settings)
        described = await client.get_workflow_handle("survives-restart").describe()
        assert described.status == WorkflowExecutionStatus.RUNNING


async def test_not_embedded_starts_nothing(tmp_path: Path) -> None:
    settings = local_settings(embedded=False)
    async with EmbeddedTemporal(settings, tmp_path) as server:
        assert not server.started
        assert not await temporal_answers(settings.address)
    assert not (tmp_path / "temporal.sqlite").exists()


async def test_start_failure_reports_the_log(tmp_path: Path) -> None:
    # Something that is not Temporal holds the port: the probe says no, the server cannot bind.
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        settings = local_settings(squatter.getsockname()[1])
        server = EmbeddedTemporal(settings, tmp_path, startup_timeout=20)
        with pytest.raises(TemporalServerError, match=re.escape("temporal-server.log")):
            await server.__aenter__()
        assert server.pid is None  # nothing left running


def go_starts_with(memory_limit: str) -> bool:
    """Whether Go's runtime takes `memory_limit` as GOMEMLIMIT: it stops at start if not."""
    env = {**os.environ, "GOMEMLIMIT": memory_limit}
    run = subprocess.run([temporal_cli_path(), "--version"], env=env, capture_output=True)
    return run.returncode == 0 and b"GOMEMLIMIT" not in run.stderr


def memory_limit(value: str) -> str | None:
    """The setting's value as the server is given it; ValidationError when it refuses it."""
    return local_settings(server_memory_limit=value).server_memory_limit


# Go's sizes and what people write instead: decimal or lower-case units, signs, decimals, spaces.
_UNITS = st.sampled_from(["", "B", "KiB", "MiB", "GiB", "TiB", "MB", "GB", "kib", "mib", "K", "M"])
_LIMITS = st.one_of(
    st.tuples(st.integers(min_value=0, max_value=2**42).map(str), _UNITS).map("".join),
    st.tuples(
        st.sampled_from(["", " ", "-", "+"]),
        st.integers(min_value=0, max_value=2**42).map(str),
        st.sampled_from(["", ".5"]),
        st.sampled_from(["", " "]),
        _UNITS,
    ).map("".join),
    st.sampled_from(["off", "OFF", "none", "", "0"]),
)


@hypothesis.settings(max_examples=60, deadline=None)
@given(value=_LIMITS)
@hypothesis.example("350MB")
@hypothesis.example("1GB")
@hypothesis.example("512mib")
@hypothesis.example("350MiB")
@hypothesis.example("8388608TiB")
def test_the_server_memory_limit_is_one_go_starts_with(value: str) -> None:
    # Checked against Go itself: a limit the setting takes never stops the server at start.
    try:
        taken = memory_limit(value)
    except ValidationError:
        hypothesis.event("refused")
        return
    hypothesis.event("taken")
    assert taken is not None and go_starts_with(taken), f"took {value!r}, which Go refuses"


def test_the_server_memory_limit_takes_go_sizes_and_refuses_too_little() -> None:
    for value in ("300MiB", " 1GiB", "67108864", "64MiB", "8388607TiB", "off"):
        assert memory_limit(value) == value.strip()
    for value in ("300MB", "1.5GiB", "300 MiB", "1kib", "-1", "0", "63MiB", "8388608TiB"):
        with pytest.raises(ValidationError, match="TEMPORAL_SERVER_MEMORY_LIMIT"):
            memory_limit(value)


def test_an_unset_memory_limit_leaves_the_server_as_go_runs_it(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GOMEMLIMIT", raising=False)
    assert "GOMEMLIMIT" not in EmbeddedTemporal(local_settings(), tmp_path).environment()
    # One the operator's environment holds reaches the server; the setting, when set, wins.
    monkeypatch.setenv("GOMEMLIMIT", "1GiB")
    assert EmbeddedTemporal(local_settings(), tmp_path).environment()["GOMEMLIMIT"] == "1GiB"
    limited = EmbeddedTemporal(local_settings(server_memory_limit="350MiB"), tmp_path)
    assert limited.environment()["GOMEMLIMIT"] == "350MiB"


async def test_the_benchmarks_dev_server_takes_a_memory_limit_and_nothing_after_it_does(
    monkeypatch, temporal_env
) -> None:
    # The session's server is a child of this process too: the limited one is told apart by port.
    monkeypatch.setenv("GOMEMLIMIT", "1GiB")
    limited = await start_dev_server(memory_limit="300MiB", dev_server_log_level="error")
    try:
        pid = dev_server_pid(limited)
        assert pid != dev_server_pid(temporal_env)
        assert environ(pid)["GOMEMLIMIT"] == "300MiB"
        # What starts after it (the benchmark's Workers) has this process's own environment.
        assert os.environ["GOMEMLIMIT"] == "1GiB"
    finally:
        await limited.shutdown()

"""The deployment the chaos drill attacks: real processes, on one backend, in front of fake Slack.

    sqlite:     TemporalServer (db file) <- `refund-bot -v run` (the bot, the supervisor, the
                Worker and its standby; stores in its DATA_DIR) <- the Slack fake's customers
    postgresql: TemporalServer (db file) <- `refund-bot -v bot` x2 (bot-1, bot-2) and
                `refund-bot worker --supervised` (worker-a: its Worker and standby) <- PostgreSQL
                (harness/postgres.py, the drill's own server) <- the Slack fake's customers

Slack is harness.fakes.slack_api: the processes call its Web API, and the customers' events reach
each bot's HTTP endpoint signed as Slack signs them (harness/chaos/edge.py). The refund's owner
is the offline ledger, in the stores' database; grants are the grant store's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import signal
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import aiohttp
from temporalio.client import Client

from agent.settings import AgentSettings
from agent.stores.databases import close_databases
from harness import free_port
from harness.chaos.processes import MARKER_ENV, Service, TemporalServer, left_behind
from harness.cli_process import clean_environment
from harness.codec import TEST_CODEC_ENV, TEST_CONVERTER
from harness.conditions import wait_for
from harness.fakes.slack_api import FakeSlackApi
from harness.postgres import PostgresServer
from worker.runner import prepare_stores

Backend = Literal["sqlite", "postgresql"]

SECRET = "chaos-drill-signing-secret"
TEAM, CHANNEL = "T0CHAOS", "C0SUPPORT"
ADMIN = "U0ADMIN"
WORKER_HOST = "worker-a"
TASK_QUEUE = "refund-bot"
READY_TIMEOUT = 180.0
# The supervisor's own lines (worker/standby.py) say which Worker child is the standby.
_PREPARED = re.compile(r"Standby Worker pid (\d+) preparing")
_PROMOTED = re.compile(r"Standby pid (\d+) promoted")


@dataclass
class Bot:
    """A process that serves Slack's events: `refund-bot run` or `refund-bot bot`."""

    service: Service
    port: int

    @property
    def name(self) -> str:
        return self.service.name

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"


@dataclass
class Deployment:
    backend: Backend
    root: Path
    marker: str
    slack: FakeSlackApi
    temporal: TemporalServer
    postgres: PostgresServer | None
    database_url: str | None
    bots: list[Bot]
    supervisor: Service  # the process whose children are the Worker and its standby
    settings: AgentSettings  # the drill's own view of the stores (the owners it audits)
    client: Client | None = None
    starts: dict[str, int] = field(default_factory=dict)  # process starts, counted at the stop
    # What went wrong stopping everything: a status other than 0, a process left behind.
    problems: list[str] = field(default_factory=list)

    @property
    def services(self) -> list[Service]:
        found = [b.service for b in self.bots]
        return found if any(s is self.supervisor for s in found) else [*found, self.supervisor]

    def worker_children(self) -> list[int]:
        """The live Worker processes under the supervisor: the active one(s) and the standby."""
        return self.supervisor.children_running("refund_bot", "worker")

    def _standby_pids(self) -> set[int]:
        """Standbys the supervisor prepared and has not promoted, from its own log lines."""
        text = self.supervisor.output()
        prepared = {int(pid) for pid in _PREPARED.findall(text)}
        return prepared - {int(pid) for pid in _PROMOTED.findall(text)}

    def active_workers(self) -> list[int]:
        standbys = self._standby_pids()
        return [pid for pid in self.worker_children() if pid not in standbys]

    def standbys(self) -> list[int]:
        standbys = self._standby_pids()
        return [pid for pid in self.worker_children() if pid in standbys]

    async def start(self) -> None:
        """Every refund-bot process started, and ready."""
        await asyncio.gather(*(service.start() for service in self.services))
        await self.ready()

    async def ready(self) -> None:
        """Every bot's Slack endpoint answers and a Worker polls, with its standby beside it."""

        async def answers(bot: Bot) -> bool:
            try:
                async with (
                    aiohttp.ClientSession() as http,
                    http.get(f"http://127.0.0.1:{bot.port}/", timeout=aiohttp.ClientTimeout(2)),
                ):
                    return True
            except (aiohttp.ClientError, TimeoutError):
                return False

        for bot in self.bots:
            await wait_for(
                functools.partial(answers, bot), timeout=READY_TIMEOUT, what=f"{bot.name} to serve"
            )
        await wait_for(
            lambda: self.active_workers() and self.standbys(),
            timeout=READY_TIMEOUT,
            interval=0.2,
            what="a Worker polling and its standby",
        )


def _common_env(
    slack: FakeSlackApi, temporal: TemporalServer, marker: str, quick_retry: float
) -> dict[str, str]:
    return clean_environment(
        **TEST_CODEC_ENV,  # the drill's client reads what the processes write
        **{MARKER_ENV: marker},
        TEMPORAL_ADDRESS=temporal.address,
        TEMPORAL_EMBEDDED="false",  # the drill owns Temporal: it kills and restarts it
        TEMPORAL_TASK_QUEUE=TASK_QUEUE,
        SLACK_BOT_TOKEN=slack.token,
        SLACK_API_URL=slack.url,
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_SUPPORT_CHANNEL=CHANNEL,
        REFUND_ADMINS=f"slack:{ADMIN}",
        DEMO_CUSTOMER_FOR_NEW_USERS="",  # every customer is linked to an account of their own
        REFUND_QUICK_RETRY=f"{quick_retry:g}s",
        REFUND_OUTAGE_PATIENCE="6h",
    )


async def build(
    backend: Backend,
    root: Path,
    marker: str,
    slack: FakeSlackApi,
    *,
    quick_retry: float,
    restart_after: float,
) -> Deployment:
    """The processes, not started yet except Temporal and PostgreSQL (the stores need them)."""
    temporal = TemporalServer(root / "temporal", {**clean_environment(), MARKER_ENV: marker})
    await temporal.start()
    env = _common_env(slack, temporal, marker, quick_retry)
    postgres: PostgresServer | None = None
    database_url: str | None = None
    if backend == "postgresql":
        postgres = PostgresServer()
        await postgres.start()
        database_url = await postgres.create_database()
        env["DATABASE_URL"] = database_url

    def service(name: str, args: list[str], **more: str) -> Service:
        data_dir = root / name
        data_dir.mkdir(parents=True, exist_ok=True)
        return Service(
            name,
            args,
            {**env, "DATA_DIR": str(data_dir), **more},
            data_dir,
            restart_after=restart_after,
        )

    if backend == "sqlite":
        port = free_port()
        run = service("run", ["-v", "run"], SLACK_PORT=str(port), REFUND_BOT_HOST=WORKER_HOST)
        bots = [Bot(run, port)]
        supervisor = run
        settings = AgentSettings(_env_file=None, data_dir=root / "run")
    else:
        bots = []
        for name in ("bot-1", "bot-2"):
            port = free_port()
            bots.append(Bot(service(name, ["-v", "bot"], SLACK_PORT=str(port)), port))
        supervisor = service("worker-a", ["worker", "--supervised"], REFUND_BOT_HOST=WORKER_HOST)
        settings = AgentSettings(
            _env_file=None,  # type: ignore[call-arg]
            data_dir=root / "drill",
            database_url=database_url,
        )
    return Deployment(
        backend,
        root,
        marker,
        slack,
        temporal,
        postgres,
        database_url,
        bots,
        supervisor,
        settings,
    )


@asynccontextmanager
async def deployed(
    backend: Backend, *, quick_retry: float, restart_after: float, root: Path | None = None
) -> AsyncIterator[Deployment]:
    """A deployment on `backend` in `root` (default: a new temporary directory), its stores
    prepared and Temporal and PostgreSQL up; the refund-bot processes are the caller's to start
    (Deployment.start). Leaving it stops every process as an operator does (SIGTERM), then says
    in `problems` what did not stop cleanly and what was left behind (by the marker in each
    process's environment). The directory, with every log, is the caller's to remove."""
    root = root or Path(tempfile.mkdtemp(prefix="refund-bot-chaos-"))
    marker = uuid.uuid4().hex
    # Every process started from here inherits it (PostgreSQL's keeper too): see left_behind.
    previous = os.environ.get(MARKER_ENV)
    os.environ[MARKER_ENV] = marker
    try:
        async with FakeSlackApi(team_id=TEAM) as slack:
            deployment = await build(
                backend, root, marker, slack, quick_retry=quick_retry, restart_after=restart_after
            )
            try:
                deployment.client = await Client.connect(
                    deployment.temporal.address, data_converter=TEST_CONVERTER
                )
                await prepare_stores(deployment.settings)
                yield deployment
            finally:
                await _stop(deployment)
        await asyncio.sleep(1.0)  # children tied to a stopped parent exit on their own
        for pid, command in left_behind(marker).items():
            deployment.problems.append(f"process left behind: pid {pid}: {command}")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    finally:
        await close_databases()
        if previous is None:
            os.environ.pop(MARKER_ENV, None)
        else:
            os.environ[MARKER_ENV] = previous


async def _stop(deployment: Deployment) -> None:
    """Every process stopped as an operator stops it (SIGTERM), bots first, then Temporal and
    PostgreSQL; a status other than 0 is a problem. Each step is tried whatever came before."""
    problems = deployment.problems
    for service in deployment.services:
        deployment.starts[service.name] = service.starts
        try:
            code = await service.stop()
        except Exception as err:
            problems.append(f"{service.name} could not be stopped: {err!r}")
            continue
        if code not in (0, None):
            problems.append(f"{service.name} stopped with status {code} on SIGTERM")
    deployment.starts["temporal"] = deployment.temporal.starts
    try:
        await deployment.temporal.stop()
    except Exception as err:
        problems.append(f"Temporal could not be stopped: {err!r}")
    if deployment.postgres is not None:
        try:
            await deployment.postgres.stop()
        except Exception as err:
            problems.append(f"PostgreSQL could not be stopped: {err!r}")

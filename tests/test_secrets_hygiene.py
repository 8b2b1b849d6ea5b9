"""Secrets hygiene: every secret setting, set to a recognisable value, reaches only what uses it,
and leaks through no path a process exposes.

    secrets: SLACK_BOT_TOKEN, SLACK_APP_TOKEN, SLACK_SIGNING_SECRET, DISCORD_TOKEN,
             STRIPE_API_KEY, OPENAI_API_KEY, TEMPORAL_API_KEY, CODEC_KEYS, CODEC_SERVER_TOKEN,
             DATABASE_URL's password
    paths:   logs at -vv (every process, the Worker's log file), every process's
             /proc/<pid>/cmdline, the environment of children that do not use a secret
             (/proc/<pid>/environ), Event History as the server stores it, /metrics and /healthz,
             what was posted in a thread or answered to a command, what a process prints when it
             refuses to start

The story runs in real processes, as a deployment runs them: `refund-bot -vv run` (Slack in Socket
Mode against harness/fakes/slack_api.py, Discord through harness/fakes/discord_gateway.py and
discord_api.py, the supervised Worker and its standby, the OpenAI decider against
harness/fakes/openai_api.py, refunds in Stripe test mode against harness/fakes/stripe_api.py),
`refund-bot -vv bot` (Slack in HTTP mode, signed requests), `refund-bot codec-server` with its
token, and a `refund-bot worker` given a wrong database password. Temporal is the session's dev
server behind harness/fakes/temporal_tls.py: a client with an API key always speaks TLS, and the
proxy reads the key it sends. The stores are a PostgreSQL database whose user must give its
password. Every secret is also shown to have been used (the fake, the proxy or the database saw
it), so its absence everywhere else means something.

Two shorter stories read what the story above cannot: the embedded Temporal server that
`refund-bot run` starts (it takes no TEMPORAL_API_KEY: it speaks no TLS) gets none of the secrets,
and the /refund-demo plain loop gets only those it uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import aiohttp
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent.codec import CodecKey
from agent.models import Actor, ThreadRef
from agent.settings import AgentSettings
from demo.plain_process import PLAIN_LOOP_SECRETS, PlainProcess
from harness import free_port
from harness.cli_process import clean_environment, descendants, environ
from harness.codec import raw_bytes
from harness.conditions import wait_for
from harness.fakes.discord_api import FakeDiscordAPI
from harness.fakes.openai_api import FakeOpenAI
from harness.fakes.slack_api import FakeSlackApi, SlackSender, signed_headers
from harness.fakes.stripe_api import FakeStripe
from harness.fakes.temporal_tls import TemporalTLSProxy
from harness.postgres import PostgresServer
from tests.support.discord_guild import CUSTOMER as DISCORD_CUSTOMER
from tests.support.discord_guild import GUILD, SUPPORT, seed_guild
from worker.settings import SECRETS as SECRET_SETTINGS
from worker.settings import WORKER_SECRETS

MARK = "HYGIENE"
CODEC_KEY = CodecKey("hygiene-key", b"HYGIENE-codec-key-0008-32-bytes!")
DB_USER, DB_PASSWORD = "refund_hygiene", f"{MARK}-db-password-0010"
SECRETS = {
    "SLACK_BOT_TOKEN": f"xoxb-{MARK}-slack-bot-token-0001",
    "SLACK_SIGNING_SECRET": f"{MARK}-slack-signing-secret-0002",
    "SLACK_APP_TOKEN": f"xapp-1-{MARK}-slack-app-token-0003",
    "DISCORD_TOKEN": f"{MARK}-discord-bot-token-0004",
    "STRIPE_API_KEY": f"sk_test_{MARK}_stripe_key_0005",
    "OPENAI_API_KEY": f"sk-{MARK}-openai-key-0006",
    "TEMPORAL_API_KEY": f"{MARK}-temporal-api-key-0007",
    "CODEC_KEYS": CODEC_KEY.entry(),
    "CODEC_SERVER_TOKEN": f"{MARK}-codec-server-token-0009",
    # DATABASE_URL: the password above, in the URL the fixture makes
}
# Each secret as it could show up: its value, the codec key's bytes and base64, the database
# password alone, and the mark every one of them carries.
NEEDLES = [
    *SECRETS.values(),
    CODEC_KEY.secret.decode(),
    CODEC_KEY.entry().split(":")[1],
    DB_PASSWORD,
    MARK,
]
TEAM, CHANNEL, ADMIN = "T0SHOP", "C0SUPPORT", "U0ADMIN"
OPENING = "please refund order 1234, my plush python unravelled"
ANSWER = "Its tail came off in the wash"
STARTUP, TURN = 120.0, 120.0


def test_every_secret_setting_is_covered() -> None:
    """The settings that hold secrets, as refund-bot's own list names them, are all set here."""
    assert set(SECRETS) | {"DATABASE_URL"} == SECRET_SETTINGS
    from refund_bot.config import SETTINGS, env_name, is_secret

    secret_fields = {
        env_name(cls, name)
        for _, cls in SETTINGS
        for name in cls.model_fields
        if is_secret(cls, name)
    }
    assert secret_fields == SECRET_SETTINGS


@dataclass
class Process:
    """A refund-bot command running with its output in a file, so every line it wrote is kept."""

    name: str
    proc: asyncio.subprocess.Process
    output: Path
    seen: set[int] = field(default_factory=set)  # its tree, as read while it ran

    def tree(self) -> set[int]:
        found = {self.proc.pid, *descendants(self.proc.pid)}
        self.seen |= found
        return found

    async def stop(self) -> str:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(60):
                    await self.proc.wait()
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        return self.output.read_text(errors="replace")


@dataclass
class Story:
    tmp: Path
    env: dict[str, str]
    processes: list[Process] = field(default_factory=list)

    async def start(self, name: str, *args: str, **env: str | None) -> Process:
        output = self.tmp / f"{name}.out"
        merged = {**self.env, **env}
        with output.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "refund_bot", *args,
                env={k: v for k, v in merged.items() if v is not None},
                cwd=self.tmp,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
        process = Process(name, proc, output)
        self.processes.append(process)
        return process

    def running(self) -> bool:
        for p in self.processes:
            assert p.proc.returncode is None, f"{p.name} exited: {p.output.read_text()[-3000:]}"
        return True


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def secrets_in(env: dict[str, str]) -> set[str]:
    """Which secret settings an environment holds (by name)."""
    return {name for name in SECRET_SETTINGS if env.get(name)}


def leaks(where: str, texts: Iterable[str]) -> list[str]:
    return [f"{needle!r} in {where}" for text in texts for needle in NEEDLES if needle in text]


@pytest.fixture
async def database_url(postgres: PostgresServer) -> AsyncIterator[str]:
    url = await postgres.create_password_database(DB_USER, DB_PASSWORD)
    try:
        yield url
    finally:
        await postgres.drop_database(url)


@contextlib.asynccontextmanager
async def fakes(
    temporal_address: str,
) -> AsyncIterator[tuple[FakeSlackApi, FakeStripe, FakeOpenAI, FakeDiscordAPI, TemporalTLSProxy]]:
    async with (
        FakeSlackApi(
            token=SECRETS["SLACK_BOT_TOKEN"], app_token=SECRETS["SLACK_APP_TOKEN"], team_id=TEAM
        ) as slack,
        FakeStripe(api_key=SECRETS["STRIPE_API_KEY"]) as stripe,
        FakeOpenAI(api_key=SECRETS["OPENAI_API_KEY"]) as openai,
        FakeDiscordAPI(token=SECRETS["DISCORD_TOKEN"]) as discord,
        TemporalTLSProxy(temporal_address) as temporal,
    ):
        yield slack, stripe, openai, discord, temporal


async def test_no_secret_leaks_through_any_path(
    temporal_env: WorkflowEnvironment, database_url: str, tmp_path: Path
) -> None:
    assert DB_PASSWORD in database_url
    queue = f"hygiene-{uuid.uuid4().hex[:8]}"
    upstream = temporal_env.client.service_client.config.target_host
    ops, worker_metrics = f"127.0.0.1:{free_port()}", _two_free_ports()
    slack_port, codec_port = free_port(), free_port()
    found: list[str] = []
    async with (
        fakes(upstream) as (slack, stripe, openai, discord, temporal),
        aiohttp.ClientSession() as http,
    ):
        seed_guild(discord)
        story = Story(
            tmp_path,
            clean_environment(
                HOME=str(tmp_path),
                **SECRETS,
                DATABASE_URL=database_url,
                TEMPORAL_ADDRESS=temporal.address,
                TEMPORAL_EMBEDDED="false",
                TEMPORAL_TASK_QUEUE=queue,
                TEMPORAL_CONTROL_TASK_QUEUE=f"{queue}-control",
                SSL_CERT_FILE=str(temporal.ca_file),  # Temporal's TLS, by the proxy's own CA
                SLACK_SUPPORT_CHANNEL=CHANNEL,
                SLACK_API_URL=slack.url,
                DISCORD_SUPPORT_CHANNEL_ID=str(SUPPORT),
                DISCORD_GUILD_ID=str(GUILD),
                DISCORD_API_URL=discord.api_url,
                DISCORD_GATEWAY_URL=discord.gateway_url,
                STRIPE_API_BASE=stripe.url,
                AGENT_DECIDER="openai",
                OPENAI_BASE_URL=openai.api_url,
                REFUND_ADMINS=f"slack:{ADMIN}",
                DEMO_CUSTOMER_FOR_NEW_USERS="cus_nyghtowl",  # a demo workspace
                CODEC_SERVER_PORT=str(codec_port),
            ),
        )
        try:
            # The main job: Slack in Socket Mode, Discord, the supervised Worker and its standby.
            run = await story.start(
                "run", "-vv", "run",
                DATA_DIR=str(tmp_path / "run"),
                METRICS_ADDRESS=ops,
                WORKER_METRICS_ADDRESS=f"127.0.0.1:{worker_metrics}",
            )  # fmt: skip
            # A bot replica in Slack's HTTP mode (no app token, so no Socket Mode; no Discord).
            await story.start(
                "bot", "-vv", "bot",
                DATA_DIR=str(tmp_path / "bot"),
                SLACK_APP_TOKEN=None,
                DISCORD_TOKEN=None,
                SLACK_PORT=str(slack_port),
            )  # fmt: skip
            events = f"http://127.0.0.1:{slack_port}/slack/events"

            async def serving() -> bool:
                story.running()
                if slack.socket_connections < 1 or discord.gateway.connected < 1:
                    return False
                with contextlib.suppress(aiohttp.ClientConnectionError):
                    async with http.post(events, data=b"") as response:
                        return response.status == 401  # up, refusing an unsigned request
                return False

            await wait_for(serving, timeout=STARTUP, what="Socket Mode, Discord and HTTP mode up")
            await wait_for(
                lambda: story.running() and len(run.tree()) >= 3,
                timeout=STARTUP,
                what="run's Worker and standby",
            )
            await story.start("codec-server", "codec-server")

            # A Slack customer over Socket Mode, start to finish: the model's lookups, the refund.
            sender = SlackSender(slack)
            opening = sender.post(CHANNEL, OPENING)
            await slack.socket_send("events_api", opening.payload)
            root = opening.payload["event"]["ts"]
            for asked, answer in enumerate(("Yes", ANSWER), 1):
                await _questions(slack, root, story, asked)
                reply = sender.post(CHANNEL, answer, thread_ts=root)
                await slack.socket_send("events_api", reply.payload)
            await wait_for(
                lambda: any("refund is complete" in m["text"] for m in slack.thread(CHANNEL, root)),
                timeout=TURN,
                what="Your refund is complete, in Slack",
            )
            workflow_id = f"slack-{TEAM}-{CHANNEL}-{root}"

            # A presenter reads it back through the HTTP-mode replica (a signed request).
            command = sender.command("/refund-status", workflow_id, user=ADMIN, name="ada")
            headers = signed_headers(SECRETS["SLACK_SIGNING_SECRET"], command)
            async with http.post(events, data=command.body, headers=headers) as response:
                assert response.status == 200
            (status,) = await wait_for(lambda: slack.responses, timeout=TURN, what="/refund-status")
            assert f"damage: `{ANSWER}`" in status["text"], status

            # A Discord customer through the gateway: the Worker posts the first question.
            message = discord.user_message(SUPPORT, DISCORD_CUSTOMER, "please refund order 4500")
            await wait_for(
                lambda: (
                    story.running()
                    and any(
                        m["author"]["id"] == discord.bot_user["id"]
                        for m in discord.messages(message["id"])
                    )
                ),
                timeout=TURN,
                what="the agent's question in the Discord thread",
            )

            # /healthz and /metrics of the main job, /metrics of its Worker and its standby.
            pages: list[str] = []
            for url in (
                f"http://{ops}/healthz",
                f"http://{ops}/metrics",
                f"http://127.0.0.1:{worker_metrics}/metrics",  # the Worker's
                f"http://127.0.0.1:{worker_metrics + 1}/metrics",  # the standby's
            ):
                pages.append(str(await wait_for(partial(_page, http, url), timeout=TURN, what=url)))
            found += leaks("an HTTP page", pages)

            # Every process's command line, and what each child of run holds of the secrets.
            codec_server = story.processes[-1]
            trees = {p.name: p.tree() for p in story.processes}
            assert len(trees["run"]) == 3, trees  # its Worker and standby, nothing else
            found += leaks("a command line", (cmdline(pid) for t in trees.values() for pid in t))
            for child in trees["run"] - {run.proc.pid}:
                held = secrets_in(environ(child))
                assert held == WORKER_SECRETS, f"Worker child {child} holds {sorted(held)}"
            assert secrets_in(environ(run.proc.pid)) == SECRET_SETTINGS  # what it was given

            # The codec server decrypts for whoever holds its token, and only for them.
            raw = await Client.connect(upstream)  # no codec, no proxy: the server's bytes
            stored = await raw.get_workflow_handle(workflow_id).fetch_history()
            signal_input = next(
                e.workflow_execution_signaled_event_attributes.input
                for e in stored.events
                if e.HasField("workflow_execution_signaled_event_attributes")
            )
            codec = f"http://127.0.0.1:{codec_port}/decode"
            body = json_format.MessageToDict(signal_input)
            token = {"Authorization": f"Bearer {SECRETS['CODEC_SERVER_TOKEN']}"}
            async with http.post(codec, json=body, headers=token) as response:
                assert response.status == 200
                decoded = json_format.ParseDict(await response.json(), Payloads())
            assert OPENING.encode() in decoded.SerializeToString()
            async with http.post(codec, json=body) as response:
                assert response.status == 401
            assert codec_server.proc.returncode is None

            # Every history of this story, as the server stores it.
            histories = []
            async for execution in raw.list_workflows(f"TaskQueue = '{queue}'"):
                history = await raw.get_workflow_handle(execution.id).fetch_history()
                histories.append(raw_bytes(history) + history.to_json().encode())
            assert len(histories) >= 2
        finally:
            outputs = {p.name: await p.stop() for p in reversed(story.processes)}

        # A Worker refused by the database (a wrong password): what it prints as it exits.
        wrong = database_url.replace(DB_PASSWORD, f"{MARK}-wrong-password-0011")
        refused = await story.start(
            "worker-refused", "-vv", "worker", DATA_DIR=str(tmp_path / "w"), DATABASE_URL=wrong
        )
        assert await asyncio.wait_for(refused.proc.wait(), 60) == 1
        outputs["worker-refused"] = refused.output.read_text(errors="replace")
        assert "refund-bot: " in outputs["worker-refused"], outputs["worker-refused"]

    logs = {**outputs, "worker.log": (tmp_path / "run" / "worker.log").read_text(errors="replace")}
    assert "issue_refund" in logs["worker.log"]  # the Worker logged its work at INFO
    assert " DEBUG " in logs["run"]  # -vv: the debug lines too
    assert "Codec server on" in logs["codec-server"]
    found += [leak for name, text in logs.items() for leak in leaks(f"the log of {name}", [text])]
    # Posted in a thread, answered to a command, edited: everything sent to either platform.
    posted = [json.dumps(call.params) for call in slack.calls]
    posted += [json.dumps(r) for r in (*slack.responses, *slack.ephemerals)]
    posted += [json.dumps(r.json) for r in discord.requests if r.json is not None]
    found += leaks("what was posted to a platform", posted)
    for stored_bytes in histories:
        for needle in [*NEEDLES, OPENING, ANSWER, "plush python"]:
            if needle.encode() in stored_bytes:
                found.append(f"{needle!r} in Event History")
    assert found == []

    # Every secret was live: each fake, the proxy or the database saw it.
    assert slack.calls_to("chat.postMessage")  # the fake refuses any other bot token
    assert slack.calls_to("apps.connections.open")  # with the app token, or refused
    assert slack.responses  # HTTP mode took a request signed with the signing secret
    assert discord.gateway.identifies  # IDENTIFY with another token closes with 4004
    assert all(
        r.headers.get("Authorization") == f"Bot {SECRETS['DISCORD_TOKEN']}"
        for r in discord.requests_to("POST /channels/{channel_id}/messages")
    )
    assert any(r.method == "POST" for r in stripe.requests) and stripe.refunds
    assert openai.requests
    assert temporal.api_keys == {SECRETS["TEMPORAL_API_KEY"]}
    assert temporal.connections >= 4  # run, its Worker and standby, the bot, the codec server
    assert "password authentication failed" in outputs["worker-refused"] or (
        "authentication" in outputs["worker-refused"]
    ), outputs["worker-refused"]


async def test_the_embedded_temporal_server_gets_no_secret(tmp_path: Path) -> None:
    """`refund-bot run` with its own Temporal (which speaks no TLS, so no TEMPORAL_API_KEY) and
    its SQLite stores: the server child gets none of the secrets, the Worker children only theirs
    (Slack in HTTP mode here: its signing secret is the one they must not hold), and no command
    line carries one."""
    given = {k: v for k, v in SECRETS.items() if k not in ("TEMPORAL_API_KEY", "SLACK_APP_TOKEN")}
    env = clean_environment(
        **given,
        HOME=str(tmp_path),
        DATA_DIR=str(tmp_path / "data"),
        TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}",
        TEMPORAL_UI_PORT=str(free_port()),
        # Slack and Discord configured (their secrets are set) but never reached: the point is
        # what each child holds, not the conversations.
        SLACK_SUPPORT_CHANNEL=CHANNEL,
        SLACK_API_URL=f"http://127.0.0.1:{free_port()}/api/",
        SLACK_PORT=str(free_port()),
        DISCORD_SUPPORT_CHANNEL_ID=str(SUPPORT),
        DISCORD_API_URL=f"http://127.0.0.1:{free_port()}/api/v10",
        DISCORD_GATEWAY_URL=f"ws://127.0.0.1:{free_port()}/",
        AGENT_DECIDER="openai",
    )
    story = Story(tmp_path, env)
    run = await story.start("run", "-vv", "run")
    try:
        server = tmp_path / "data" / "temporal-server.pid"
        worker_log = tmp_path / "data" / "worker.log"

        def standby_ready() -> bool:
            # Not only forked: a child read between its fork and the end of its exec shows its
            # parent's environment, then none at all (/proc/<pid>/environ), not its own. Once the
            # standby says it is ready, every child has its own, and none is being started.
            log = worker_log.read_text(errors="replace") if worker_log.exists() else ""
            return re.search(r"standby \S+ ready; polls", log) is not None

        await wait_for(
            lambda: story.running() and server.exists() and standby_ready(),
            timeout=STARTUP,
            what="run's Temporal server, Worker and standby",
        )
        assert len(run.tree()) >= 4  # run, its server, the Worker and the standby
        server_pid = json.loads(server.read_text())["pid"]
        tree = run.tree()
        assert server_pid in tree
        assert secrets_in(environ(server_pid)) == set()
        for child in tree - {run.proc.pid, server_pid}:
            held = secrets_in(environ(child))
            assert held == WORKER_SECRETS - {"TEMPORAL_API_KEY", "DATABASE_URL"}, (child, held)
        assert leaks("a command line", (cmdline(pid) for pid in tree)) == []
    finally:
        output = await run.stop()
    assert leaks("the log of run", [output]) == []
    server_log = (tmp_path / "data" / "temporal-server.log").read_text(errors="replace")
    assert leaks("the Temporal server's log", [server_log]) == []


async def test_the_plain_loop_gets_only_the_secrets_it_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/refund-demo's plain loop, started as the bot starts it, from a process that holds every
    secret: it posts, refunds and asks the model, and never talks to Temporal."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    settings = AgentSettings(_env_file=None, data_dir=tmp_path)
    thread = ThreadRef(platform="local", workspace="local", channel="support", thread="t9")
    customer = Actor(platform="local", user_id="nyghtowl", display_name="Ny")
    loop = await PlainProcess.start(
        settings,
        thread,
        customer,
        "plain-hygiene",
        "1234",
        calls=tmp_path / "calls.jsonl",
        log_file=tmp_path / "plain.log",
        child_env={},
    )
    try:
        held = secrets_in(environ(loop.pid))
        assert held == set(PLAIN_LOOP_SECRETS) - {"DATABASE_URL"}, sorted(held)
        assert leaks("its command line", [cmdline(loop.pid)]) == []
    finally:
        await loop.stop()
    assert leaks("its log", [(tmp_path / "plain.log").read_text(errors="replace")]) == []
    assert os.environ["CODEC_KEYS"] == SECRETS["CODEC_KEYS"]  # this process held them all


def _two_free_ports() -> int:
    """A port free with the next one: the Worker's and its standby's metrics (slots 0 and 1)."""
    for _ in range(50):
        port = free_port()
        with contextlib.suppress(OSError), socket.socket() as probe:
            probe.bind(("127.0.0.1", port + 1))
            return port
    raise AssertionError("no two free ports in a row")


async def _page(http: aiohttp.ClientSession, url: str) -> str | None:
    """The page once it is served (a standby's exporter starts with it); /healthz may say 503
    (a platform reconnecting): what it says is the point, not its verdict."""
    try:
        async with http.get(url) as response:
            assert response.status in (200, 503), (url, response.status)
            return await response.text()
    except aiohttp.ClientConnectionError:
        return None


async def _questions(slack: FakeSlackApi, root: str, story: Story, count: int) -> None:
    def asked() -> bool:
        story.running()
        return len([m for m in slack.thread(CHANNEL, root) if m.get("bot_id")]) >= count

    await wait_for(asked, timeout=TURN, what=f"the agent's question {count} in Slack")

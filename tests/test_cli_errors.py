"""Every configuration mistake is one clear line: the real CLI, run as a subprocess for each.

Each case exits non-zero with exactly one line on stderr, naming the setting (or the id) and what
to do, and no traceback anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
from asyncio.subprocess import PIPE
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from harness import free_port
from harness.cli_process import clean_environment
from harness.codec import TEST_CODEC_ENV
from harness.fakes.discord_api import FakeDiscordAPI
from refund_bot.cli import build_parser

# Placeholders the test fills in: the session's Temporal server, a regular file, a busy port, a
# port nothing listens on.
TEMPORAL = "{temporal}"
A_FILE = "{file}"
BUSY_PORT = "{busy_port}"
FREE_PORT = "{free_port}"

CASES: list[tuple[str, list[str], dict[str, str], list[str]]] = [
    # (id, argv, environment, what the line must name)
    (
        "slack token without signing secret or app token",
        ["run"],
        {"SLACK_BOT_TOKEN": "xoxb-1-2-x", "SLACK_SUPPORT_CHANNEL": "C0SUPPORT"},
        ["SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN"],
    ),
    (
        "slack without a support channel",
        ["run"],
        {"SLACK_BOT_TOKEN": "xoxb-1-2-x", "SLACK_SIGNING_SECRET": "s3cret"},
        ["SLACK_SUPPORT_CHANNEL"],
    ),
    (
        "slack support channel given by name",
        ["run"],
        {
            "SLACK_BOT_TOKEN": "xoxb-1-2-x",
            "SLACK_APP_TOKEN": "xapp-1-2-x",
            "SLACK_SUPPORT_CHANNEL": "#support",
        },
        ["SLACK_SUPPORT_CHANNEL", "'#support'"],
    ),
    (
        "discord token without a support channel",
        ["run"],
        {"DISCORD_TOKEN": "discord-bot-token"},
        ["DISCORD_SUPPORT_CHANNEL_ID"],
    ),
    ("data dir not writable", ["run"], {"DATA_DIR": f"{A_FILE}/data"}, ["DATA_DIR"]),
    ("malformed admins entry", ["run"], {"REFUND_ADMINS": "slack:U0ADA,bob"}, ["REFUND_ADMINS"]),
    ("integer setting not an integer", ["run"], {"SLACK_PORT": "three thousand"}, ["SLACK_PORT"]),
    ("port not an integer", ["demo"], {"TEMPORAL_UI_PORT": "82x3"}, ["TEMPORAL_UI_PORT"]),
    (
        "server memory limit in a unit Go does not read",
        ["run"],
        {"TEMPORAL_SERVER_MEMORY_LIMIT": "300MB"},
        ["TEMPORAL_SERVER_MEMORY_LIMIT", "350MiB"],
    ),
    (
        "discord channel id not a number",
        ["run"],
        {"DISCORD_TOKEN": "t", "DISCORD_SUPPORT_CHANNEL_ID": "#support"},
        ["DISCORD_SUPPORT_CHANNEL_ID"],
    ),
    ("boolean not a boolean", ["run"], {"TEMPORAL_EMBEDDED": "maybe"}, ["TEMPORAL_EMBEDDED"]),
    (
        "outage patience past the conversation's window",
        ["worker"],
        {"REFUND_OUTAGE_PATIENCE": "30d"},
        ["REFUND_OUTAGE_PATIENCE=30d", "live 54d 1h 1m", "30d window", "5d or less"],
    ),
    ("unknown decider", ["run"], {"AGENT_DECIDER": "gpt-5"}, ["AGENT_DECIDER", "policy"]),
    ("openai decider without key: run", ["run"], {"AGENT_DECIDER": "openai"}, ["OPENAI_API_KEY"]),
    ("openai decider without key: demo", ["demo"], {"AGENT_DECIDER": "openai"}, ["OPENAI_API_KEY"]),
    (
        "openai decider without key: worker",
        ["worker"],
        {"AGENT_DECIDER": "openai"},
        ["OPENAI_API_KEY"],
    ),
    ("discord sync-commands without token", ["discord", "sync-commands"], {}, ["DISCORD_TOKEN"]),
    ("stripe-setup without key", ["stripe-setup"], {}, ["STRIPE_API_KEY"]),
    ("live stripe key", ["run"], {"STRIPE_API_KEY": "sk_live_do_not_print"}, ["STRIPE_API_KEY"]),
    (
        "mTLS certificate that does not exist",
        ["status", "x"],
        {"TEMPORAL_TLS_CERT_PATH": "/nonexistent/c.pem", "TEMPORAL_TLS_KEY_PATH": A_FILE},
        ["TEMPORAL_TLS_CERT_PATH"],
    ),
    (
        "status for an unknown id",
        ["status", "local-local-support-t999"],
        {"TEMPORAL_ADDRESS": TEMPORAL},
        ["local-local-support-t999", "TEMPORAL_ADDRESS", "slack-"],
    ),
    ("status with Temporal down", ["status", "local-local-support-t1"], {}, ["TEMPORAL_ADDRESS"]),
    (
        "run with no embedded server and Temporal down",
        ["run"],
        {"TEMPORAL_EMBEDDED": "false"},
        ["TEMPORAL_ADDRESS"],
    ),
    ("Web UI port in use", ["run"], {"TEMPORAL_UI_PORT": BUSY_PORT}, ["TEMPORAL_UI_PORT"]),
    (
        "database url of another kind",
        ["run"],
        {"DATABASE_URL": "mysql://refund:hunter2@db.example.com/refund"},
        ["DATABASE_URL", "postgresql://", "sqlite:///", "refund:***@"],
    ),
    (
        "database url naming a file",
        ["worker"],
        {"DATABASE_URL": f"sqlite:///{A_FILE}"},
        ["DATABASE_URL", "directory"],
    ),
    (
        "database unreachable",
        ["run"],
        {"DATABASE_URL": f"postgresql://refund:hunter2@127.0.0.1:{FREE_PORT}/refund"},
        ["DATABASE_URL", "cannot reach the database", "refund:***@127.0.0.1"],
    ),
    ("bot with no chat platform", ["bot"], {}, ["SLACK_BOT_TOKEN", "DISCORD_TOKEN", "run"]),
    (
        "bot with Temporal down",
        ["bot"],
        {"DISCORD_TOKEN": "t", "DISCORD_SUPPORT_CHANNEL_ID": "1", **TEST_CODEC_ENV},
        ["TEMPORAL_ADDRESS"],
    ),
    (
        "bot without a codec key",
        ["bot"],
        {"DISCORD_TOKEN": "t", "DISCORD_SUPPORT_CHANNEL_ID": "1", "TEMPORAL_ADDRESS": TEMPORAL},
        ["CODEC_KEYS"],
    ),
    ("metrics address not host:port", ["bot"], {"METRICS_ADDRESS": "9464"}, ["METRICS_ADDRESS"]),
    (
        "host name with a space",
        ["worker", "--supervised"],
        {"REFUND_BOT_HOST": "two words"},
        ["REFUND_BOT_HOST"],
    ),
]


IDS = [case[0] for case in CASES]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as squatter:
        yield squatter.getsockname()[1]


@pytest.mark.parametrize(
    ("argv", "env", "named"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_mistake_is_one_line_naming_the_setting(
    argv: list[str],
    env: dict[str, str],
    named: list[str],
    tmp_path: Path,
    temporal_env: WorkflowEnvironment,
    busy_port: int,
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    fill = {
        TEMPORAL: temporal_env.client.service_client.config.target_host,
        A_FILE: str(a_file),
        BUSY_PORT: str(busy_port),
        FREE_PORT: str(free_port()),  # nothing listens there
    }
    for placeholder, value in fill.items():
        env = {k: v.replace(placeholder, value) for k, v in env.items()}
    proc = subprocess.run(
        [sys.executable, "-m", "refund_bot", *argv],
        env={
            **clean_environment(),
            "DATA_DIR": str(tmp_path / ".data"),
            "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",  # nothing answers there
            "TEMPORAL_UI_PORT": str(free_port()),
            **env,
        },
        cwd=tmp_path,  # no .env here
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert len(lines) == 1, proc.stderr
    (line,) = lines
    assert line.startswith("refund-bot: "), line
    for name in named:
        assert name in line, line
    for secret in ("sk_live_do_not_print", "hunter2"):
        assert secret not in proc.stderr + proc.stdout  # a secret is never shown


def test_every_command_has_a_one_line_description() -> None:
    parser = build_parser()
    listed = parser.format_help()
    for name, sub in _subcommands(parser):
        summary = sub.description.split(". ")[0] if sub.description else ""
        assert summary and "\n" not in summary, name
        assert sub.format_usage().startswith(f"usage: refund-bot {name}"), name
        assert name.split()[0] in listed
    # The same one line, shown in the parent's list next to each command.
    assert "what survives of a conversation" in listed
    status = dict(_subcommands(parser))["status"].format_help()
    for form in ("local-local-support-t1", "slack-<team>-<channel>-<thread ts>", "discord-<guild"):
        assert form in " ".join(status.split()), status


def _subcommands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((f"{prefix}{name}", sub))
                found.extend(_subcommands(sub, f"{prefix}{name} "))
    return found


async def test_discord_sync_commands_refusals_are_one_line(tmp_path: Path) -> None:
    async def sync(token: str, api_url: str) -> tuple[int, str, str]:
        env = {**clean_environment(), "DISCORD_TOKEN": token, "DISCORD_API_URL": api_url}
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
            env.pop(name, None)  # the fake is on loopback
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "refund_bot",
            "discord",
            "sync-commands",
            env=env,
            cwd=tmp_path,
            stdout=PIPE,
            stderr=PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    async with FakeDiscordAPI() as api:
        code, out, err = await sync("not-the-bot-token", api.api_url)
        assert code == 1 and "Traceback" not in err, err
        (line,) = err.strip().splitlines()
        assert line.startswith("refund-bot: DISCORD_TOKEN was refused by Discord"), line
        assert "not-the-bot-token" not in out + err

        code, out, err = await sync(api.token, api.api_url)
        assert code == 0, err
        assert out.startswith("Registered ") and "refund-status" in out

    code, out, err = await sync(api.token, f"http://127.0.0.1:{free_port()}/api/v10")
    assert code == 1 and "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    assert "DISCORD_API_URL" in line, line

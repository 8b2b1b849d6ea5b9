"""The Worker processes the benchmarks run: refund-bot's own, and the reference demo's.

    refund_bot_worker(...) / reference_worker(...) -> a child process (tied to this one's life)
    wait_polling(client, queue, procs) -> returns once Temporal lists a poller for each

refund-bot's is `python -m refund_bot worker`, the command its supervisor runs, with no chat
platform, the offline ledger and the tests' codec key. The reference's is its own Worker module,
unchanged, from its checkout and virtualenv, in dry-run mode (no keys) with a state directory of
its own (its fake Stripe ledger and agent views live there).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from temporalio.client import Client

from harness.cli_process import clean_environment
from harness.codec import TEST_CODEC_ENV
from worker.lifecycle import spawn_child
from worker.pollers import workflow_pollers

START_TIMEOUT = 120.0


async def spawn_process(
    argv: list[str], env: Mapping[str, str], log: Path, lifeline: bool
) -> asyncio.subprocess.Process:
    with log.open("ab") as err:
        return await spawn_child(
            argv,
            on_parent_death=signal.SIGKILL,
            lifeline=lifeline,
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
        )


def refund_bot_env(address: str, queue: str, data_dir: Path) -> dict[str, str]:
    """The environment of a benchmark's `refund-bot worker`."""
    return {
        **clean_environment(),
        "SLACK_BOT_TOKEN": "",
        "SLACK_APP_TOKEN": "",
        "DISCORD_TOKEN": "",
        "STRIPE_API_KEY": "",
        **TEST_CODEC_ENV,
        "DATA_DIR": str(data_dir),
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_TASK_QUEUE": queue,
        "TEMPORAL_CONTROL_TASK_QUEUE": f"{queue}-control",
    }


async def refund_bot_worker(
    address: str, queue: str, data_dir: Path, log: Path
) -> asyncio.subprocess.Process:
    env = refund_bot_env(address, queue, data_dir)
    return await spawn_process(
        [sys.executable, "-m", "refund_bot", "worker"], env, log, lifeline=True
    )


async def reference_worker(
    python: Path, checkout: Path, address: str, queue: str, state: Path, log: Path
) -> asyncio.subprocess.Process:
    state.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (once per Worker)
    env = {
        **os.environ,
        "PYTHONPATH": str(checkout / "src"),
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_TASK_QUEUE": queue,
        "DEMO_STATE_DIR": str(state),
        "DOTENV_PATH": str(state / ".env"),  # none: the reference's dry run, no keys
    }
    env.pop("STRIPE_API_KEY", None)
    return await spawn_process([str(python), "-m", "refund_agent.worker"], env, log, lifeline=False)


async def wait_polling(
    client: Client, queue: str, procs: Sequence[asyncio.subprocess.Process], log: Path
) -> None:
    """Return once Temporal lists as many workflow pollers on `queue` as there are `procs`."""
    deadline = time.monotonic() + START_TIMEOUT
    while len(await workflow_pollers(client, client.namespace, queue)) < len(procs):
        if any(proc.returncode is not None for proc in procs):
            raise RuntimeError(f"a Worker on {queue} exited: see {log}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"Workers not polling {queue} after {START_TIMEOUT:.0f} s: {log}")
        await asyncio.sleep(0.1)

"""The whole stack for end-to-end tests: the router, the commands and a supervised Worker process.

It is `refund_bot.app.running_stack`, the one `refund-bot run` uses, pointed at the session's
Temporal dev server (or starting the server `refund-bot run` embeds, for a benchmark), with its own
task queues and data directory. The Worker is a real child
process (`python -m refund_bot worker`), so /crash-worker really SIGKILLs it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from pydantic import SecretStr
from temporalio.testing import WorkflowEnvironment

from agent.settings import AgentSettings, TemporalSettings
from harness.codec import TEST_CODEC_ENV, with_test_keys
from refund_bot.app import running_stack
from refund_bot.stack import Stack

# The child inherits this process's environment: blank out anything a developer's shell or .env
# could bring in, so a test's Worker serves exactly the platforms the test asks for.
_BLANK_PLATFORMS = {
    "SLACK_BOT_TOKEN": "",
    "SLACK_APP_TOKEN": "",
    "DISCORD_TOKEN": "",
    "STRIPE_API_KEY": "",
    "REFUND_DRILL_PAUSE_AFTER_EFFECT": "false",
    "WORKER_METRICS_ADDRESS": "off",  # ports are shared by every test run on the machine
    **TEST_CODEC_ENV,  # the session's key, so the test's own client reads what the Worker wrote
}


def settings_for(
    temporal_env: WorkflowEnvironment | TemporalSettings, data_dir: Path
) -> tuple[TemporalSettings, AgentSettings]:
    settings = with_test_keys(AgentSettings(_env_file=None, data_dir=data_dir))
    if isinstance(temporal_env, TemporalSettings):
        return temporal_env, settings
    queue = f"e2e-{uuid.uuid4().hex[:8]}"
    temporal = TemporalSettings(
        _env_file=None,
        address=temporal_env.client.service_client.config.target_host,
        task_queue=queue,
        control_task_queue=f"{queue}-control",
    )
    return temporal, settings


@asynccontextmanager
async def supervised_stack(
    temporal_env: WorkflowEnvironment | TemporalSettings,
    data_dir: Path,
    worker_env: dict[str, str] | None = None,
    *,
    hold: bool = False,
    workers: int = 1,
    database_url: str | None = None,
) -> AsyncIterator[Stack]:
    """`temporal_env`: a test server (the stack gets task queues of its own on it), or the
    settings of the server `refund-bot run` embeds, which the stack starts on their address.
    `worker_env` adds settings for the Worker child (e.g. SLACK_BOT_TOKEN, SLACK_API_URL);
    `workers`: Worker children polling at once; `database_url`: the stores on PostgreSQL (the
    SQLite files in `data_dir` without it), for this process and the Worker both."""
    temporal, settings = settings_for(temporal_env, data_dir)
    update: dict[str, object] = {"hold_before_refund": hold}
    if database_url is not None:
        update["database_url"] = SecretStr(database_url)
        worker_env = {**(worker_env or {}), "DATABASE_URL": database_url}
    settings = settings.model_copy(update=update)
    env = child_env(data_dir, worker_env)
    async with running_stack(temporal, settings, worker_env=env, workers=workers) as stack:
        yield stack


def child_env(data_dir: Path, worker_env: dict[str, str] | None = None) -> dict[str, str]:
    """What a test's Worker child (and /refund-demo's plain loop) adds to this environment."""
    return {**_BLANK_PLATFORMS, "DATA_DIR": str(data_dir), **(worker_env or {})}

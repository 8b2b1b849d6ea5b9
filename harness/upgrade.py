"""An upgrade as an operator makes it: conversations a release left open, finished by this code.

    a git tag's code, in a temporary worktree -> its Worker opens a conversation at every stage
        (harness/upgrade_stages.py) and stops -> the dev server stops, its database a file
    this code, on the same database and data directory -> each conversation finished:
        answered, approved and refunded once, released, handed back

Run by the release step (`python -m harness.release check`), not by `make test`: it needs the
release tags and a second environment (`make setup` in the tag's worktree, from uv's cache).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from agent.models import Takeover
from agent.sayings import HANDED_BACK
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from agent.workflow import RefundConversation
from bot.local.thread_store import LocalThreadStore
from harness.conversation import SUPPORT, LocalConversation
from harness.dev_server import start_dev_server
from harness.inproc import running_worker
from harness.owner import refunds_made

ROOT = Path(__file__).resolve().parents[1]
STAGES_SCRIPT = Path(__file__).with_name("upgrade_stages.py")
ANSWERS = {"Was the package opened?": "Yes", "What was damaged?": "Split seam"}


@dataclass(frozen=True)
class Finished:
    """One conversation the old code left at `stage`, as this code finished it."""

    stage: str
    workflow_id: str
    status: str
    refunds: int  # refunds the ledger holds for it
    said: list[str]  # what the agent posted after the upgrade


def tag_exists(tag: str) -> bool:
    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}"],
        capture_output=True,
    )
    return found.returncode == 0


@asynccontextmanager
async def release_worktree(tag: str) -> AsyncIterator[Path]:
    """The tag's code in a temporary worktree with its own locked environment."""
    with tempfile.TemporaryDirectory(prefix=f"refund-bot-{tag}-") as tmp:
        code = Path(tmp) / "code"
        await _run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(code), tag], ROOT)
        try:
            await _run(["make", "setup"], cwd=code)
            shutil.copy(STAGES_SCRIPT, code / "harness" / STAGES_SCRIPT.name)
            yield code
        finally:
            await _run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(code)], ROOT)


async def _run(command: list[str], cwd: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        *command, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await process.communicate()
    if process.returncode != 0:
        tail = output.decode(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(command)} failed in {cwd} ({process.returncode}):\n{tail}")


async def open_stages(
    code: Path, address: str, data_dir: Path, task_queue: str, histories: Path | None = None
) -> list[dict[str, str]]:
    """The old code's Worker opens a conversation at each stage it has, then stops."""
    out = data_dir.parent / f"stages-{uuid.uuid4().hex[:6]}.json"
    command = [
        str(code / ".venv" / "bin" / "python"),
        "-m",
        "harness.upgrade_stages",
        f"--address={address}",
        f"--data-dir={data_dir}",
        f"--task-queue={task_queue}",
        f"--out={out}",
    ]
    if histories is not None:
        command.append(f"--histories={histories}")
    await _run(command, cwd=code)
    opened: list[dict[str, str]] = json.loads(out.read_text())
    return opened


async def _finish(conv: LocalConversation, stage: str) -> str:
    """Do what the stage waits for, then answer, approve and release until the outcome."""
    handle = conv.handle
    assert handle is not None
    if stage == "held":
        await handle.signal(RefundConversation.release)
    elif stage == "taken_over":
        await handle.signal(RefundConversation.takeover, Takeover(actor=SUPPORT, taken=False))
    elif stage in ("escalated", "reminded"):
        await conv.click("approve", SUPPORT)
    while (message := await conv.next_bot_message(timeout=60)).kind != "outcome":
        if message.kind == "question":
            await conv.reply(ANSWERS.get(message.text, "Yes"))
        elif message.kind == "escalation":
            await conv.click("approve", SUPPORT)
        elif "/refund-release" in message.text:
            await handle.signal(RefundConversation.release)
    outcome = await asyncio.wait_for(handle.result(), 60)
    return outcome.status


async def finish_stages(
    opened: list[dict[str, str]], address_db: Path, data_dir: Path, task_queue: str
) -> list[Finished]:
    """This code, on the database and data directory the old code left, finishes each one."""
    env = await start_dev_server(dev_server_database_filename=str(address_db))
    settings = AgentSettings(_env_file=None, data_dir=data_dir)
    threads = LocalThreadStore(database_for(settings))
    finished: list[Finished] = []
    async with env, running_worker(env.client, settings, threads, task_queue):
        for row in opened:
            handle = env.client.get_workflow_handle_for(RefundConversation.run, row["workflow_id"])
            conv = LocalConversation(env.client, threads, task_queue, handle=handle)
            conv.thread_id = row["thread_id"]
            messages = await conv.bot_messages()
            before = len(messages)
            # A stage waiting for the customer's answer: its question is the next to answer.
            asked = [i for i, m in enumerate(messages) if m.kind == "question"]
            waits_for_answer = row["stage"] in ("waiting", "customer_reminded")
            conv._seen_bot = asked[-1] if waits_for_answer else before
            try:
                status = await _finish(conv, row["stage"])
            except AssertionError as stuck:  # a condition's deadline passed: say which, go on
                status = f"stuck ({stuck})"
            said = [m.text for m in (await conv.bot_messages())[before:]]
            refunds = [r for r in await refunds_made(settings) if r.workflow_id == handle.id]
            finished.append(Finished(row["stage"], handle.id, status, len(refunds), said))
    return finished


def problems(finished: list[Finished]) -> list[str]:
    """What went wrong, one line each: every stage refunds once; a takeover is handed back."""
    wrong = []
    for f in finished:
        if f.status != "refunded" or f.refunds != 1:
            wrong.append(f"{f.stage}: {f.status} with {f.refunds} refund(s): {f.said}")
        if f.stage == "taken_over" and HANDED_BACK not in f.said:
            wrong.append(f"{f.stage}: not handed back: {f.said}")
    return wrong


async def upgrade_from(tag: str) -> tuple[list[Finished], float]:
    """Conversations at every stage on `tag`'s code, finished on this code; and how long it took."""
    began = time.monotonic()
    async with release_worktree(tag) as code:
        with tempfile.TemporaryDirectory(prefix="refund-bot-upgrade-") as tmp:
            database, data_dir = Path(tmp) / "temporal.db", Path(tmp) / "data"
            data_dir.mkdir()
            task_queue = f"upgrade-{uuid.uuid4().hex[:8]}"
            env = await start_dev_server(dev_server_database_filename=str(database))
            async with env:
                address = env.client.service_client.config.target_host
                opened = await open_stages(code, address, data_dir, task_queue)
            # The server and the old Worker are stopped; this code starts on what they left.
            finished = await finish_stages(opened, database, data_dir, task_queue)
    return finished, time.monotonic() - began


@asynccontextmanager
async def this_code() -> AsyncIterator[Path]:
    yield ROOT


async def record_stages(tag: str | None, into: Path) -> list[str]:
    """The tag's own code (None: this tree's) opens a conversation at each stage; their
    histories go `into`."""
    async with release_worktree(tag) if tag else this_code() as code:
        with tempfile.TemporaryDirectory(prefix="refund-bot-record-") as tmp:
            data_dir = Path(tmp) / "data"
            data_dir.mkdir()
            await asyncio.to_thread(into.mkdir, parents=True, exist_ok=True)
            env = await start_dev_server()
            async with env:
                address = env.client.service_client.config.target_host
                opened = await open_stages(code, address, data_dir, "record", histories=into)
    return [row["stage"] for row in opened]


if __name__ == "__main__":
    results, took = asyncio.run(upgrade_from(sys.argv[1]))
    for result in results:
        print(result)
    print(f"{took:.1f} s", problems(results) or "every conversation finished")

"""The unattended story and a full restart, each on its own embedded Temporal server."""

from __future__ import annotations

import os
import subprocess
import sys

from agent.settings import AgentSettings, TemporalSettings
from agent.stores.ledger import Ledger
from agent.workflow import RefundConversation
from refund_bot.app import running_stack
from refund_bot.wiring import local_thread_store
from tests.support import free_port
from tests.support.conversation import LocalConversation
from worker.server import temporal_answers


def test_refund_bot_demo_tells_the_whole_story(tmp_path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "DATA_DIR": str(tmp_path / ".data"),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{port}",  # nothing answers there: the demo embeds one
        "TEMPORAL_UI_PORT": str(free_port()),
        "SLACK_BOT_TOKEN": "",
        "DISCORD_TOKEN": "",
        "STRIPE_API_KEY": "",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "refund_bot", "demo"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    # Two answers, two lookups, next action issue refund, Worker killed, survivors read from
    # history, released, "Your refund is complete", one refund.
    assert out.count("refund-bot: Was the package opened?") == 1
    assert out.count("refund-bot: What was damaged?") == 1
    assert "Next action: issue refund" in out
    assert "customer answers: 2" in out and "completed lookups: 2" in out
    assert "  next action: issue refund" in out
    assert "offline ledger: refunds none" in out
    assert "New Worker: old pid" in out
    assert "refund-bot: Your refund is complete" in out
    for check in ("NO REPEATED QUESTIONS", "NO LOOP RESTART", "ONE REFUND"):
        assert f"ok   {check}" in out
    assert (tmp_path / ".data" / "temporal.sqlite").exists()


async def test_open_conversation_survives_a_restart_of_everything(tmp_path) -> None:
    port = free_port()
    temporal = TemporalSettings(
        _env_file=None,
        address=f"127.0.0.1:{port}",
        ui_port=free_port(),  # type: ignore[call-arg]
    )
    settings = AgentSettings(_env_file=None, data_dir=tmp_path)  # type: ignore[call-arg]
    env = {"DATA_DIR": str(tmp_path), "SLACK_BOT_TOKEN": "", "DISCORD_TOKEN": ""}
    threads = local_thread_store(settings)
    async with running_stack(temporal, settings, worker_env=env) as stack:
        conv = LocalConversation(stack.client, threads, temporal.task_queue)
        handle = await conv.open("please refund order 1234")
        assert (await conv.next_bot_message()).text == "Was the package opened?"
        await conv.reply("Yes")
        assert (await conv.next_bot_message()).text == "What was damaged?"
    # Server, Worker and bot are all gone; only the data directory remains.
    assert not await temporal_answers(temporal.address)

    async with running_stack(temporal, settings, worker_env=env) as stack:
        conv.client = stack.client
        conv.handle = stack.client.get_workflow_handle_for(RefundConversation.run, handle.id)
        await conv.reply("Split seam")
        outcome = await conv.handle.result()
    assert outcome.status == "refunded"
    questions = [m.text for m in await conv.bot_messages() if m.kind == "question"]
    assert questions == ["Was the package opened?", "What was damaged?"]
    assert len(await Ledger(settings.ledger_db).refunds_for_workflow(handle.id)) == 1

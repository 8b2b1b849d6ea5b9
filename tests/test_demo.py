"""The unattended story and a full restart, each on its own embedded Temporal server."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agent.settings import AgentSettings, TemporalSettings
from agent.stores.databases import database_for
from agent.stores.ledger import Ledger
from agent.workflow import RefundConversation
from harness import free_port
from harness.cli_process import clean_environment
from harness.conversation import LocalConversation
from harness.fakes.openai_api import FakeOpenAI
from harness.fakes.stripe_api import FakeStripe
from refund_bot.app import running_stack
from refund_bot.wiring import local_thread_store
from worker.server import temporal_answers


def _model_env(data_dir: Path, model: FakeOpenAI, **settings: str) -> dict[str, str]:
    """The demo's environment with the live model (a fake on loopback: no proxy in between)."""
    env = _demo_env(
        data_dir,
        AGENT_DECIDER="openai",
        OPENAI_API_KEY=model.api_key,
        OPENAI_BASE_URL=model.api_url,
        OPENAI_MODEL="test-model",
        **settings,
    )
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        env.pop(name, None)
    return env


def _demo_env(data_dir: Path, **settings: str) -> dict[str, str]:
    return {
        **clean_environment(),
        "DATA_DIR": str(data_dir),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",  # nothing answers: the demo embeds one
        "TEMPORAL_UI_PORT": str(free_port()),
        **settings,
    }


async def _run_demo(env: dict[str, str], cwd: Path, *args: str) -> str:
    """`refund-bot demo` as a subprocess, awaited so this loop keeps serving any fakes."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "refund_bot",
        "demo",
        *args,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(proc.communicate(), timeout=240)
    out = output.decode()
    assert proc.returncode == 0, out
    assert "Traceback" not in out, out
    return out


def _assert_the_story(out: str, order_number: str) -> None:
    # A fresh order, two answers, two lookups, next action issue refund, Worker killed, survivors
    # read from history, released, "Your refund is complete", one refund.
    assert f"A fresh order for this run: {order_number} (plush python, $80.00)" in out
    assert "refund-bot: Was the package opened?" in out
    assert out.count("refund-bot: Was the package opened?") == 1
    assert out.count("refund-bot: What was damaged?") == 1
    assert "Next action: issue refund" in out
    assert "customer answers: 2" in out and "completed lookups: 2" in out
    assert "New Worker: old pid" in out
    assert "refund-bot: Your refund is complete" in out
    for check in ("NO REPEATED QUESTIONS", "NO LOOP RESTART", "ONE REFUND"):
        assert f"ok   {check}" in out


async def test_refund_bot_demo_tells_the_story_again_and_again(tmp_path: Path) -> None:
    data_dir = tmp_path / ".data"
    first = await _run_demo(_demo_env(data_dir), tmp_path)
    _assert_the_story(first, "10001")
    assert "Decide step: the offline policy" in first
    assert "  next action: issue refund" in first  # read from history while no Worker was alive
    assert "offline ledger: refunds none" in first  # read while no Worker was alive
    assert (data_dir / "temporal.sqlite").exists()

    # README's story in between: the customer has order 1234 refunded in the terminal channel.
    temporal = TemporalSettings(
        _env_file=None,
        address=f"127.0.0.1:{free_port()}",
        ui_port=free_port(),
    )
    settings = AgentSettings(_env_file=None, data_dir=data_dir)
    env = {"DATA_DIR": str(data_dir), "SLACK_BOT_TOKEN": "", "DISCORD_TOKEN": ""}
    async with running_stack(temporal, settings, worker_env=env) as stack:
        conv = LocalConversation(stack.client, local_thread_store(settings), temporal.task_queue)
        handle = await conv.open("please refund order 1234")
        await conv.next_bot_message()
        await conv.reply("Yes")
        await conv.next_bot_message()
        await conv.reply("Split seam")
        # The seeded customer's story is untouched by the demo's: 1234 still clears on its own.
        assert (await asyncio.wait_for(handle.result(), 60)).status == "refunded"

    second = await _run_demo(_demo_env(data_dir), tmp_path)
    _assert_the_story(second, "10003")  # 10002 was the first run's customer's earlier refund
    made = await Ledger(database_for(settings)).all_refunds()
    # The agent's refunds (each from a conversation), beside the seeded earlier refunds.
    assert {r.order_number for r in made if r.workflow_id} == {"10001", "1234", "10003"}
    assert {r.order_number for r in made if not r.workflow_id} == {"1001", "10002", "10004"}


async def test_demo_honours_agent_decider_and_pays_in_stripe_test_mode(tmp_path: Path) -> None:
    # The model escalates: the support agent approves in the thread, and the story carries on.
    async with FakeOpenAI(decision="escalate") as model, FakeStripe() as stripe:
        env = _model_env(
            tmp_path / ".data", model, STRIPE_API_KEY=stripe.api_key, STRIPE_API_BASE=stripe.url
        )
        out = await _run_demo(env, tmp_path)
    _assert_the_story(out, "10001")
    assert "Decide step: the model test-model (AGENT_DECIDER=openai)" in out
    # The model made every decide step (the policy keeps only the intake questions).
    assert len(model.requests) == 3
    assert all(r["model"] == "test-model" for r in model.requests)
    assert "10001" in model.requests[-1]["input"]
    assert "refund-bot: This refund needs a support agent: order 10001" in out
    assert "Approved by Sam (support agent), checking authorization" in out
    # The fresh order was paid by a test-mode PaymentIntent, and that is what was refunded; the
    # fresh customer's earlier order was paid and refunded at Stripe too, before the story.
    (intent,) = [i for i in stripe.payment_intents.values() if i["amount"] == 8000]
    assert intent["status"] == "succeeded"
    (refund,) = [r for r in stripe.refunds.values() if r["payment_intent"] == intent["id"]]
    assert refund["amount"] == 8000
    assert f"paid with {intent['id']}" in out
    assert sorted(r["amount"] for r in stripe.refunds.values()) == [1800, 8000]


async def test_open_conversation_survives_a_restart_of_everything(tmp_path) -> None:
    port = free_port()
    temporal = TemporalSettings(
        _env_file=None,
        address=f"127.0.0.1:{port}",
        ui_port=free_port(),
    )
    settings = AgentSettings(_env_file=None, data_dir=tmp_path)
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
    assert len(await Ledger(database_for(settings)).refunds_for_workflow(handle.id)) == 1


async def test_side_by_side_tells_both_demos_and_counts_the_model_calls(tmp_path: Path) -> None:
    # The live model decides (a fake, on loopback): its own record of requests is the owner of
    # "model calls made", and the story's counts must agree with it.
    async with FakeOpenAI() as model:
        out = await _run_demo(_model_env(tmp_path / ".data", model), tmp_path, "--side-by-side")
    for frame in (
        "== PROCESS GONE ==",
        "== WORKER GONE ==",
        "== WHAT SURVIVES ==",
        "== NO REPEATED QUESTIONS · NO LOOP RESTART ==",
        "== THE CUSTOMER STARTS OVER ==",
        "== SAME CRASH, TWO OUTCOMES ==",
    ):
        assert out.count(frame) == 1, (frame, out)
    assert "Please start the return again." in out
    assert "ok: every count is the docs page's." in out
    without, durable = out.split("Without Temporal\n")[-1].split("With Temporal\n")
    # Per side: the order lookup, the history lookup and the decision, each a model call; the
    # plain loop made its three again after the crash, the Workflow none.
    assert "model calls made again: 3" in without and "refunds made: 0" in without
    assert "model calls made again: 0" in durable and "refunds made: 1" in durable
    assert len(model.requests) == 3 + 3 + 3


async def test_demo_carries_on_when_the_model_escalates_before_any_question(
    tmp_path: Path,
) -> None:
    # The live model escalates at its first call: the support agent approves, and the story
    # follows what the agent says from there, whatever it asks or not.
    async with FakeOpenAI(behaviour="escalate_at_once") as model:
        out = await _run_demo(_model_env(tmp_path / ".data", model), tmp_path)
    assert model.requests  # the model made the first decide step
    escalation = out.index("refund-bot: This refund needs a support agent: order 10001")
    asked = out.find("refund-bot: Was the package opened?")
    assert asked == -1 or asked > escalation, out  # the escalation came first
    assert "Approved by Sam (support agent), checking authorization" in out
    assert "New Worker: old pid" in out
    assert "refund-bot: Your refund is complete" in out
    for check in ("NO REPEATED QUESTIONS", "NO LOOP RESTART", "ONE REFUND"):
        assert f"ok   {check}" in out

"""How a Workflow change ships (docs/versioning.md): every patch registered with its versions'
histories, every wait bounded, each conversation's version recorded (and corrected in a split
deploy), and the conversations a Worker cannot run named before it polls and drained with a
sentence in their threads. Whether a patch is still inside its window depends on today's date: the
release step checks it (harness/release.py), not this suite."""

from __future__ import annotations

import ast
import asyncio
import logging
import uuid
from datetime import date, timedelta
from pathlib import Path

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.testing import WorkflowEnvironment

from agent import versions
from agent.models import Actor, ConversationStart, CustomerMessage, ThreadRef
from agent.stores.databases import database_for
from agent.stores.ledger import Ledger
from agent.versions import (
    PATCHES,
    SUPPORTED,
    WORKFLOW_VERSION,
    Patch,
    overdue,
    unsupported_conversations,
)
from agent.visibility import VERSION_ATTRIBUTE, SearchAttributesMissing
from agent.workflow import WORKFLOW_TYPE, RefundConversation
from bot.local.thread_store import LocalThreadStore
from harness.codec import TEST_CONVERTER
from harness.conditions import wait_for
from harness.conversation import LocalConversation
from harness.inproc import running_worker
from refund_bot.conversations import DRAINED, DRAINED_REFUNDED, drain, open_conversations
from worker.runner import run_worker
from worker.server import temporal_cli_path

ROOT = Path(__file__).parents[1]
WORKFLOW_SOURCE = ROOT / "agent" / "workflow.py"
# Every package of the product: a Workflow of any of them may be patched.
PRODUCT = ("agent", "bot", "worker", "refund_bot", "demo")
HISTORIES = Path(__file__).parent / "histories"
CONTROL_HISTORIES = Path(__file__).parent / "control_histories"
CUSTOMER = Actor(platform="local", user_id="customer", display_name="Nyghtowl")


def _calls(name: str) -> list[ast.Call]:
    """Every call of workflow.<name>(...) in agent/workflow.py."""
    tree = ast.parse(WORKFLOW_SOURCE.read_text())
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == name
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "workflow"
    ]


def _patch_ids(tree: ast.Module, constants: dict[str, str]) -> set[str]:
    """The ids of every workflow.patched(...) and workflow.deprecate_patch(...) in `tree`: a
    literal, or a module constant of the product holding one."""
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("patched", "deprecate_patch")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "workflow"
        ):
            arg = node.args[0]
            found.add(constants[arg.id] if isinstance(arg, ast.Name) else ast.literal_eval(arg))
    return found


def _product_trees() -> list[ast.Module]:
    files = [f for package in PRODUCT for f in sorted((ROOT / package).rglob("*.py"))]
    return [ast.parse(f.read_text()) for f in files]


def _string_constants(trees: list[ast.Module]) -> dict[str, str]:
    return {
        target.id: node.value.value
        for tree in trees
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def test_every_patch_of_the_product_is_registered() -> None:
    """Every workflow.patched id in any package of the product, and every change the Workflow
    tells apart without a marker (RefundConversation._has), is in PATCHES: the release step then
    checks its window."""
    trees = _product_trees()
    markers = set().union(*(_patch_ids(t, _string_constants(trees)) for t in trees))
    unmarked = {
        ast.literal_eval(call.args[0])
        for call in ast.walk(ast.parse(WORKFLOW_SOURCE.read_text()))
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "_has"
    }
    assert markers == {p for p, patch in PATCHES.items() if patch.marker}, markers
    assert unmarked == {p for p, patch in PATCHES.items() if not patch.marker}, unmarked


def test_every_supported_version_has_its_own_histories() -> None:
    """The conversations each supported version leaves running, recorded by its own code:
    tests/test_replay.py replays them, so each patch's older branch is exercised."""
    for version in SUPPORTED:
        folder = HISTORIES if version == WORKFLOW_VERSION else HISTORIES / f"workflow-{version}"
        assert list(folder.glob("open_*.json")), version
    conversation = _patch_ids(ast.parse(WORKFLOW_SOURCE.read_text()), {})
    for patch_id, patch in PATCHES.items():
        assert patch.version in SUPPORTED[1:], f"{patch_id}: no supported version before it"
        if patch.marker and patch_id not in conversation:
            # The control Workflows' (worker.control): kept in tests/control_histories/before-*.
            assert list(CONTROL_HISTORIES.glob("before-*/*.json")), patch_id


def test_the_window_rule_names_a_patch_past_its_day() -> None:
    shipped = date(2026, 1, 5)
    patches = {"late": Patch(version="1.1", shipped=shipped)}
    assert overdue(patches, shipped + versions.MAX_CONVERSATION_AGE) == []
    assert overdue(patches, shipped + versions.MAX_CONVERSATION_AGE + timedelta(days=1)) == ["late"]


def test_every_wait_of_a_conversation_is_bounded() -> None:
    """The window counts on it: a wait without a timeout could outlive any release."""
    waits = _calls("wait_condition")
    assert waits, "the Workflow waits somewhere"
    for call in waits:
        assert any(k.arg == "timeout" for k in call.keywords), ast.unparse(call)


async def _conversation_of_old_code(
    client, threads: LocalThreadStore, text: str = "please refund order 1234"
) -> str:
    """A conversation as code before version 1.0 left it: no version recorded, and no Worker of
    that code left to run it (its task queue has none)."""
    root = await threads.open_thread("support", CUSTOMER.user_id, text)
    start = ConversationStart(
        thread=ThreadRef(
            platform="local", workspace="local", channel="support", thread=root.thread_id
        ),
        customer=CUSTOMER,
        opening_message_id=root.message_id,
        opening_text=text,
    )
    workflow_id = f"local-old-{uuid.uuid4().hex[:12]}-{root.thread_id}"
    await client.start_workflow(
        RefundConversation.run,
        start,
        id=workflow_id,
        task_queue=f"gone-{uuid.uuid4().hex[:8]}",
        start_signal="customer_message",
        start_signal_args=[CustomerMessage(message_id=root.message_id, author=CUSTOMER, text=text)],
    )
    return workflow_id


async def _listed_unsupported(client, workflow_id: str) -> bool:
    return workflow_id in {
        c.workflow_id for c in await open_conversations(client, unsupported=True)
    }


async def test_a_worker_names_the_conversations_it_cannot_run_before_it_polls(
    client, agent_settings, caplog: pytest.LogCaptureFixture
) -> None:
    threads = LocalThreadStore(database_for(agent_settings))
    old = await _conversation_of_old_code(client, threads)
    await wait_for(lambda: _listed_unsupported(client, old), what="visibility to list it")
    found = await unsupported_conversations(client, WORKFLOW_TYPE, limit=1000)
    assert old in found.workflow_ids and found.count >= 1

    caplog.set_level(logging.INFO, logger="worker.runner")
    from agent.settings import TemporalSettings

    temporal = TemporalSettings(_env_file=None, task_queue=f"q-{uuid.uuid4().hex[:8]}")
    worker = asyncio.create_task(run_worker(client, temporal, agent_settings, {"local": threads}))
    try:

        def said() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.name == "worker.runner"]

        lines = await wait_for(
            lambda: said() if any("polling" in m for m in said()) else None, what="poll"
        )
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    [line] = [m for m in lines if "does not run" in m]
    assert old in line and "refund-bot conversations --unsupported" in line
    assert lines.index(line) < next(i for i, m in enumerate(lines) if "polling" in m)


async def test_drain_tells_the_customer_and_closes_the_conversation_once(
    client, agent_settings
) -> None:
    threads = LocalThreadStore(database_for(agent_settings))
    old = await _conversation_of_old_code(client, threads)
    await wait_for(lambda: _listed_unsupported(client, old), what="visibility to list it")
    [conversation] = [
        c for c in await open_conversations(client, unsupported=True) if c.workflow_id == old
    ]
    assert conversation.version is None and not conversation.runs_here

    line = await drain(client, agent_settings, {"local": threads}, conversation)
    assert "no refund, said so" in line
    thread = old.rsplit("-", 1)[1]
    said = [m.text for m in await threads.messages(thread) if m.author_is_bot]
    assert said == [DRAINED]
    described = await client.get_workflow_handle(old).describe()
    assert described.status == WorkflowExecutionStatus.TERMINATED
    # The same drain again (a second operator, a retry) posts nothing more: the key is stable.
    await drain(client, agent_settings, {"local": threads}, conversation)
    assert [m.text for m in await threads.messages(thread) if m.author_is_bot] == [DRAINED]


async def test_drain_says_a_refund_the_owner_holds(client, agent_settings) -> None:
    threads = LocalThreadStore(database_for(agent_settings))
    async with running_worker(client, agent_settings, threads):  # seeds the stores
        pass
    old = await _conversation_of_old_code(client, threads)
    await Ledger(database_for(agent_settings)).create_refund(
        idempotency_key=f"k-{old}",
        payment_ref="pi_demo_1234",
        amount_cents=8000,
        currency="usd",
        workflow_id=old,
        order_number="1234",
    )
    await wait_for(lambda: _listed_unsupported(client, old), what="visibility to list it")
    [conversation] = [
        c for c in await open_conversations(client, unsupported=True) if c.workflow_id == old
    ]
    line = await drain(client, agent_settings, {"local": threads}, conversation)
    assert "refund made, said so" in line
    [said] = [m.text for m in await threads.messages(old.rsplit("-", 1)[1]) if m.author_is_bot]
    assert said.startswith(DRAINED_REFUNDED.split("{")[0]) and "re_ledger_" in said


def _opening(root) -> ConversationStart:
    """The start of order 1234's conversation on the local thread `root` opened."""
    return ConversationStart(
        thread=ThreadRef(
            platform="local", workspace="local", channel="support", thread=root.thread_id
        ),
        customer=CUSTOMER,
        opening_message_id=root.message_id,
        opening_text="please refund order 1234",
    )


async def test_a_conversation_started_without_its_version_records_it(
    client, agent_settings
) -> None:
    threads = LocalThreadStore(database_for(agent_settings))
    async with running_worker(client, agent_settings, threads) as queue:
        root = await threads.open_thread("support", CUSTOMER.user_id, "please refund order 1234")
        handle = await client.start_workflow(
            RefundConversation.run,
            _opening(root),
            id=f"local-noversion-{uuid.uuid4().hex[:12]}",
            task_queue=queue,
        )

        async def recorded() -> bool:
            described = await handle.describe()
            return (
                described.typed_search_attributes.get(VERSION_ATTRIBUTE)
                == versions.WORKFLOW_VERSION
            )

        await wait_for(recorded, what="the version upserted")
        await handle.terminate("test done")


async def test_a_split_deploy_records_the_version_of_the_worker_that_runs_it(
    client, agent_settings
) -> None:
    """A starter of a newer release (deployed before the Workers) sets a version this Worker's
    code is not: its first task corrects it, so visibility names the code that runs it and neither
    the Worker's line nor the drain takes a healthy conversation for an unsupported one."""
    newer = "1.99"
    assert newer not in SUPPORTED
    threads = LocalThreadStore(database_for(agent_settings))
    async with running_worker(client, agent_settings, threads) as queue:
        conv = LocalConversation(client, threads, queue)
        root = await threads.open_thread("support", CUSTOMER.user_id, "please refund order 1234")
        conv.thread_id = root.thread_id
        conv.handle = await client.start_workflow(
            RefundConversation.run,
            _opening(root),
            id=f"local-split-{uuid.uuid4().hex[:12]}-{root.thread_id}",
            task_queue=queue,
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(VERSION_ATTRIBUTE, newer)]
            ),
            start_signal="customer_message",
            start_signal_args=[
                CustomerMessage(
                    message_id=root.message_id, author=CUSTOMER, text="please refund order 1234"
                )
            ],
        )
        await conv.wait_phase("waiting_for_customer")  # its first task has run: it asks

        async def listed() -> str | None:
            found = {c.workflow_id: c for c in await open_conversations(client)}
            row = found.get(conv.handle.id) if conv.handle else None
            return row.version if row and row.version != newer else None

        assert await wait_for(listed, what="visibility to show the version") == WORKFLOW_VERSION
        assert not await _listed_unsupported(client, conv.handle.id)
        await conv.answer_the_questions()  # and it runs on, on this code, to its refund
        assert (await conv.handle.result()).status == "refunded"


async def test_a_namespace_without_the_search_attribute_is_one_line() -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli_path()), data_converter=TEST_CONVERTER
    )
    async with env:
        with pytest.raises(SearchAttributesMissing) as missing:
            await unsupported_conversations(env.client, WORKFLOW_TYPE)
    message = str(missing.value)
    assert "temporal operator search-attribute create" in message
    assert "--name RefundBotVersion --type Keyword" in message
    assert "--name RefundBotAmountCents --type Int" in message
    assert "\n" not in message


async def test_the_next_version_replays_every_conversation_of_this_one(monkeypatch) -> None:
    """A release that bumps WORKFLOW_VERSION (and guards its change with workflow.patched) must
    replay what this one recorded: its first task corrects no version it did not correct then."""
    from temporalio.client import WorkflowHistory
    from temporalio.worker import Replayer

    major, minor = versions.WORKFLOW_VERSION.split(".")
    monkeypatch.setattr(versions, "WORKFLOW_VERSION", f"{major}.{int(minor) + 1}")
    replayer = Replayer(workflows=[RefundConversation], data_converter=TEST_CONVERTER)
    for path in sorted(HISTORIES.glob("*.json")):
        history = WorkflowHistory.from_json(path.stem, path.read_text())
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, path.stem


def test_a_conversation_lives_no_longer_than_its_window() -> None:
    """The window counts on the whole life, not only the waits: every wait ends by
    WAITS_END_AT_AGE, every step and post is retried within a budget agent.lifetime counts, and
    the longest life the settings accept fits in MAX_CONVERSATION_AGE (which the server holds
    every conversation to: tests/test_lifetime.py)."""
    from types import SimpleNamespace

    from temporalio.common import RetryPolicy

    from agent import lifetime, workflow
    from agent.models import Timing

    tree = ast.parse(WORKFLOW_SOURCE.read_text())
    [wait] = [
        f for f in ast.walk(tree) if isinstance(f, ast.AsyncFunctionDef) and f.name == "_wait"
    ]
    waits = {c.lineno for c in _calls("wait_condition")}
    assert waits and waits <= set(range(wait.lineno, (wait.end_lineno or 0) + 1)), "via _wait"
    names = {n.id for n in ast.walk(wait) if isinstance(n, ast.Name)}
    assert "WAITS_END_AT_AGE" in names, "every wait ends by WAITS_END_AT_AGE"

    timing = Timing(outage_patience=lifetime.longest_patience(Timing()))
    # What each call may spend, by what it is: the sums agent.lifetime counts are of these.
    counted = {
        "QUICK_RETRY": timing.quick_retry + lifetime.LONGEST_ATTEMPT,
        "PATIENT_RETRY": timing.outage_patience,
        "NotifyActivities.post_to_thread": lifetime.POST_RETRIES,
        "NotifyActivities.edit_thread_message": lifetime.EDIT_RETRIES,
    }
    scope = {**vars(workflow), "self": SimpleNamespace(_timing=timing)}
    scope["start_to_close"] = lifetime.LONGEST_ATTEMPT  # _step's, checked below

    def budget(call: ast.Call, name: str) -> timedelta | None:
        found = next((k.value for k in call.keywords if k.arg == name), None)
        return None if found is None else eval(ast.unparse(found), scope)

    calls = [
        c
        for name in ("execute_activity", "execute_activity_method", "execute_local_activity")
        for c in _calls(name)
    ]
    local_calls = [
        c
        for c in ast.walk(tree)
        if isinstance(c, ast.Call)
        and isinstance(c.func, ast.Name)
        and c.func.id == "_local_activity"
    ]
    assert len(calls) >= 5 and len(local_calls) >= 2
    for call in calls:
        line = ast.unparse(call)
        if "schedule_to_close_timeout=schedule_to_close" in line:
            continue  # _local_activity's: its callers are checked below
        spent = budget(call, "schedule_to_close_timeout")
        assert spent is not None, f"unbounded retries: {line}"
        kind = ast.unparse(call.args[0]) if call.args else ""
        if kind not in counted:
            kind = ast.unparse(next(k.value for k in call.keywords if k.arg == "retry_policy"))
        assert spent <= counted[kind], line
    for call in local_calls:
        spent = budget(call, "schedule_to_close")
        if spent is None:  # one try only, within a post's try
            policy = budget(call, "retry_policy")
            assert isinstance(policy, RetryPolicy) and policy.maximum_attempts == 1
            assert budget(call, "start_to_close") <= lifetime.POST_TRY
        else:
            assert spent <= counted["QUICK_RETRY"], ast.unparse(call)
    attempts = (
        workflow.SHORT_STEP_TIMEOUT,
        workflow.MODEL_STEP_TIMEOUT,
        workflow.REFUND_STEP_TIMEOUT,
    )
    assert max(attempts) <= lifetime.LONGEST_ATTEMPT
    assert workflow.LOCAL_POST_TIMEOUT <= lifetime.POST_TRY

    # The longest life the settings accept, and the defaults', fit in the window.
    assert lifetime.longest_life(timing) <= versions.MAX_CONVERSATION_AGE
    assert lifetime.longest_life(Timing()) <= versions.MAX_CONVERSATION_AGE

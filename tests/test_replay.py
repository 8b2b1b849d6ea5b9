"""Replay: the committed Event Histories replay cleanly; a reordered Workflow does not.

tests/histories/*.json are this Workflow version's, and tests/histories/workflow-<version>/ each
older version's in agent.versions.SUPPORTED: the histories that version's own code recorded,
encrypted with the tests' codec key, every path to its end (tests/histories/record.py) and a
conversation left open at every stage (open_*.json, `python -m harness.release record`). This
code replays them all. A change to the Workflow's commands ships as docs/versioning.md says:
guarded, under a new WORKFLOW_VERSION; the histories of the version before move into its folder
and are never recorded again.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from agent.codec import COMPRESSION_METADATA, ENCODING, CodecKey, MissingCodecKey
from agent.decoded_history import decoded_history
from agent.models import ConversationStart, DecideInput, LookupCustomerInput
from agent.temporal_client import data_converter
from agent.versions import SUPPORTED, WORKFLOW_VERSION
from agent.workflow import WORKFLOW_TYPE, RefundConversation
from harness.codec import TEST_CONVERTER, TEST_KEY, codec_payloads
from harness.events import LOCAL_ACTIVITY_MARKER, step_names

ROOT = Path(__file__).parent / "histories"
# Every committed history, of every supported version.
HISTORIES = sorted(ROOT.rglob("*.json"))
# This version's paths, each to its end.
HERE = ROOT
CURRENT = sorted(p for p in HERE.glob("*.json") if not p.stem.startswith("open_"))
# The stages a conversation can wait at, by the first version that had each.
STAGES = {
    "1.0": {"waiting", "escalated", "held"},
    "1.1": {"waiting", "escalated", "held", "reminded", "customer_reminded", "taken_over"},
}
# The steps that run as local activities (the decide step too, with the offline policy).
SHORT_STEPS = {
    "lookup_order",
    "lookup_customer_history",
    "check_refund_policy",
    "authorize_refund",
    "apply_refund_rules",
}


def _read(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


async def _load(path: Path, converter: DataConverter = TEST_CONVERTER) -> WorkflowHistory:
    history = _read(path)
    # A history this converter cannot decrypt fails here, naming the key id; inside the Replayer
    # it would be an opaque workflow task failure ("Encoded failure").
    await decoded_history(history, converter)
    return history


async def _decoded(path: Path) -> WorkflowHistory:
    return await decoded_history(_read(path), TEST_CONVERTER)


def _replayer(workflow_class: type) -> Replayer:
    """A Replayer that runs conversations as the Worker does: the same converter, and the SDK's
    sandboxed runner (both use it by default)."""
    return Replayer(workflows=[workflow_class], data_converter=TEST_CONVERTER)


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT).with_suffix(""))


@workflow.defn(name=WORKFLOW_TYPE)
class ReorderedConversation:
    """The same conversation with its first two steps swapped: a lookup before the decide step.

    This is the change a careless edit makes; replaying real history against it must fail.
    """

    @workflow.run
    async def run(self, start: ConversationStart) -> None:
        await workflow.execute_activity(
            "lookup_customer_history",
            LookupCustomerInput(customer=start.customer),
            start_to_close_timeout=timedelta(seconds=10),
        )
        await workflow.execute_activity(
            "decide_next_step",
            DecideInput(opening_text=start.opening_text, memory=[], turn=1),
            start_to_close_timeout=timedelta(seconds=10),
        )

    @workflow.signal
    def customer_message(self, _message: object) -> None: ...

    @workflow.signal
    def approval(self, _approval: object) -> None: ...

    @workflow.signal
    def release(self) -> None: ...


def test_every_supported_version_left_its_own_histories_at_every_stage() -> None:
    """A release's histories are recorded by its own code: the version each conversation recorded
    at its start is its folder's. Each left a conversation open at every stage it has."""
    for version in SUPPORTED:
        folder = ROOT if version == WORKFLOW_VERSION else ROOT / f"workflow-{version}"
        opened = {p.stem.removeprefix("open_") for p in folder.glob("open_*.json")}
        assert opened >= STAGES["1.0" if version == "1.0" else "1.1"], (version, opened)
        for path in folder.glob("*.json"):
            started = _read(path).events[0].workflow_execution_started_event_attributes
            payload = started.search_attributes.indexed_fields["RefundBotVersion"]
            assert json.loads(payload.data) == version, _name(path)


def test_every_path_is_recorded() -> None:
    assert {p.stem for p in CURRENT} >= {
        "auto_approved",
        "escalated",
        "reoffered",
        "declined",
        "refunded_twice",
        "model_refused",
        "model_decided",
        "model_overruled",
        "raced",
        "stale_click",
        "refund_failed",
        "late_message",
        "post_timed_out",
    }


@pytest.mark.parametrize("path", CURRENT, ids=_name)
async def test_a_conversation_records_the_version_that_started_it(path: Path) -> None:
    """RefundBotVersion is set when the conversation starts (the router sets it, so visibility
    knows it before any task runs) and the Workflow agrees: no upsert, and no patch marker but
    those of the changes open in PATCHES. The Worker that must one day replay it can tell from
    visibility alone whether it can."""
    history = await _decoded(path)
    started = history.events[0].workflow_execution_started_event_attributes
    payload = started.search_attributes.indexed_fields["RefundBotVersion"]
    assert json.loads(payload.data) == WORKFLOW_VERSION
    upserts = [
        e.upsert_workflow_search_attributes_event_attributes.search_attributes
        for e in history.events
        if e.HasField("upsert_workflow_search_attributes_event_attributes")
    ]
    upserted = {name for attributes in upserts for name in attributes.indexed_fields}
    assert "RefundBotVersion" not in upserted  # the starter's was right
    # Every path takes 1.2's order-number branch and 1.3's memo; the offline policy's, 1.1's
    # question in the decide step too. A starter of this version needs no correction.
    expected = {"order-number-named", "status-in-memo"}
    if not path.stem.startswith("model_"):
        expected.add("question-in-decide")
    assert _patch_ids(history) == expected


@pytest.mark.parametrize("path", CURRENT, ids=_name)
async def test_the_short_steps_of_a_new_conversation_are_local(path: Path) -> None:
    history = _read(path)
    steps = step_names(history.events)
    regular = set(_regular_steps(history))
    assert not regular & SHORT_STEPS, regular
    # The offline policy's decide step is local; the model's stays an Activity that heartbeats.
    model = path.stem.startswith("model_")
    assert ("decide_next_step" in regular) is model
    assert "decide_next_step" in steps
    assert set(_local_steps(history)) <= SHORT_STEPS | {"decide_next_step", "post_to_thread"}


@pytest.mark.parametrize("path", [p for p in CURRENT if not p.stem.startswith("model_")], ids=_name)
async def test_the_offline_policy_reads_the_order_and_the_history_in_one_turn(path: Path) -> None:
    """Both lookups run together: no decide step between them (the live model still chooses one
    lookup a turn). Their markers are recorded as they finish, in either order."""
    steps = step_names(_read(path).events)
    first = min(steps.index("lookup_order"), steps.index("lookup_customer_history"))
    assert set(steps[first : first + 2]) == {"lookup_order", "lookup_customer_history"}, steps


def _regular_steps(history: WorkflowHistory) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


def _local_steps(history: WorkflowHistory) -> list[str]:
    return [
        json.loads(e.marker_recorded_event_attributes.details["data"].payloads[0].data)[
            "activity_type"
        ]
        for e in history.events
        if e.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY_MARKER
    ]


def _patch_ids(history: WorkflowHistory) -> set[str]:
    found = set()
    for event in history.events:
        details = event.marker_recorded_event_attributes.details
        if "patch-data" in details:
            for payload in details["patch-data"].payloads:
                found.add(json.loads(payload.data)["id"])
    return found


@pytest.mark.parametrize("path", HISTORIES, ids=_name)
async def test_committed_history_replays_cleanly(path: Path) -> None:
    replayer = _replayer(RefundConversation)
    result = await replayer.replay_workflow(await _load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None


# A conversation to its end: the reordered code's first command meets a recorded one.
@pytest.mark.parametrize("path", CURRENT, ids=_name)
async def test_reordered_workflow_fails_replay(path: Path) -> None:
    replayer = _replayer(ReorderedConversation)
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(await _load(path))


def test_histories_are_ciphertext_and_compressed() -> None:
    for path in HISTORIES:
        events = _read(path).events
        encodings = {p.metadata["encoding"] for e in events for p in codec_payloads(e)}
        assert encodings == {ENCODING}, (_name(path), encodings)
        # Every payload compressed: all are JSON the codec's dictionary knows.
        compressed = {COMPRESSION_METADATA in p.metadata for e in events for p in codec_payloads(e)}
        assert compressed == {True}, _name(path)
    # The local activities' results are among them.
    escalated = _read(HERE / "escalated.json").events
    results = [e for e in escalated if "result" in e.marker_recorded_event_attributes.details]
    # Decide steps (two posting their questions), lookups, the rules, the grant read, posts.
    assert len(results) == 13
    assert all(p.metadata["encoding"] == ENCODING for e in results for p in codec_payloads(e))


async def test_replay_tooling_without_the_key_fails_in_one_line() -> None:
    stranger = data_converter([CodecKey.generate("not-the-tests-key")])
    with pytest.raises(MissingCodecKey) as missing:
        await _load(HERE / "escalated.json", stranger)
    assert str(missing.value).startswith(
        f"Event History is encrypted with codec key {TEST_KEY.key_id!r}"
    )

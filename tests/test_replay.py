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
from agent.history import (
    LOCAL_ACTIVITY_MARKER,
    local_activity,
    posted_message,
    step_names,
    steps_of,
    survivors_from_history,
)
from agent.models import ConversationStart, DecideInput, LookupCustomerInput
from agent.temporal_client import data_converter
from agent.versions import SUPPORTED, WORKFLOW_VERSION
from agent.workflow import WORKFLOW_TYPE, RefundConversation
from harness.codec import TEST_CONVERTER, TEST_KEY, codec_payloads

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
    # The offline policy's path takes the 1.1 branch; the model's has no such branch; every path
    # takes 1.2's order-number branch. A starter of this version needs no correction
    # ("version-in-first-task" leaves no marker then).
    named = {"order-number-named"}
    expected = named if path.stem.startswith("model_") else named | {"question-in-decide"}
    assert _patch_ids(history) == expected


@pytest.mark.parametrize("path", CURRENT, ids=_name)
async def test_a_new_conversation_posts_inside_its_workflow_tasks(path: Path) -> None:
    """Every post of a healthy platform is made by the local try (a marker with its result), the
    decided outcome's too: the run completes in the task that posts it. A message written while it
    is posted still reaches the run (late_message: the server refuses the completion)."""
    posts = _posts(await _decoded(path))
    # Answered at once, with no question: an order the rules refuse, a model that fails first.
    at_once = {"refunded_twice", "raced", "late_message", "model_overruled", "model_refused"}
    assert (True, "question") in posts or path.stem in at_once, posts
    if path.stem == "post_timed_out":  # a platform that did not answer: the Activity posted it
        assert (False, "escalation") in posts, posts
        posts.remove((False, "escalation"))
    assert posts and all(local for local, _kind in posts), posts
    assert "outcome" in {kind for _local, kind in posts}, posts


@pytest.mark.parametrize("path", CURRENT, ids=_name)
async def test_the_offline_policy_posts_each_question_in_the_step_that_asks_it(path: Path) -> None:
    """A turn of the offline policy is one local step: the decide step posts the question it asks
    (its result carries the post). The model's questions are posted apart, by post_to_thread."""
    steps = steps_of((await _decoded(path)).events, TEST_CONVERTER)
    askers = [s.name for s in steps if (m := posted_message(s)) and m.kind == "question"]
    if path.stem.startswith("model_"):
        assert set(askers) <= {"post_to_thread"}, askers
    else:
        assert set(askers) <= {"decide_next_step"}, askers
    asked = [
        s
        for s in steps
        if s.name == "decide_next_step" and s.completed and s.result.action == "ask"
    ]
    assert len(askers) == len(asked), (askers, asked)


def _posts(history: WorkflowHistory) -> list[tuple[bool, str]]:
    """(made by the local try, kind) of every post in a decoded history, in order."""
    return [
        (step.local, message.kind)
        for step in steps_of(history.events, TEST_CONVERTER)
        if (message := posted_message(step))
    ]


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
    lookup a turn). Read in the order the Workflow scheduled them, whichever finished first."""
    steps = step_names(_read(path).events)
    first = steps.index("lookup_order")
    assert steps[first : first + 2] == ["lookup_order", "lookup_customer_history"], steps


def test_steps_read_back_in_the_order_they_were_scheduled_whichever_finished_first() -> None:
    # The two lookups of one turn record their markers as they finish; swap them, as a run whose
    # history lookup finished first records them, and the reading must not change.
    events = list(_read(HERE / "auto_approved.json").events)
    lookups = [i for i, e in enumerate(events) if "lookup_" in str(local_activity(e))]
    assert len(lookups) == 2 and lookups[1] == lookups[0] + 1
    first, second = lookups
    swapped = [*events[:first], events[second], events[first], *events[second + 1 :]]
    assert step_names(swapped) == step_names(events)
    assert step_names(events)[1:3] == ["lookup_order", "lookup_customer_history"]


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


async def test_a_local_post_that_timed_out_replays_as_it_ran() -> None:
    """The platform did not answer the first post: its local try's marker holds a bare timeout
    (what the SDK hands the Workflow on replay; on the first run it raised an ActivityError) and
    the Activity posted the question. The replay takes the first run's path: the same commands,
    the conversation refunded."""
    history = await _decoded(HERE / "post_timed_out.json")
    posts = [
        step for step in steps_of(history.events, TEST_CONVERTER) if step.name == "post_to_thread"
    ]
    assert posts[0].local and posts[0].failed == "Activity timed out"
    assert not posts[1].local and posts[1].result is not None
    markers = [e for e in history.events if local_activity(e)]
    timed_out = [
        m
        for m in markers
        if m.marker_recorded_event_attributes.failure.HasField("timeout_failure_info")
    ]
    assert len(timed_out) == 1, timed_out
    result = await _replayer(RefundConversation).replay_workflow(
        await _load(HERE / "post_timed_out.json"), raise_on_replay_failure=False
    )
    assert result.replay_failure is None, result.replay_failure
    survivors = survivors_from_history(history)
    assert survivors.outcome is not None and survivors.outcome.status == "refunded"


# A conversation to its end: the reordered code's first command meets a recorded one.
@pytest.mark.parametrize("path", CURRENT, ids=_name)
async def test_reordered_workflow_fails_replay(path: Path) -> None:
    replayer = _replayer(ReorderedConversation)
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(await _load(path))


async def test_the_loser_of_a_race_reads_already_refunded_from_history() -> None:
    survivors = survivors_from_history(await _decoded(HERE / "raced.json"))
    assert survivors.closed and survivors.outcome and survivors.outcome.status == "denied"
    assert survivors.refund.state == "already_refunded"
    assert survivors.refund.refund and survivors.refund.refund.earlier is not None


async def test_what_survives_is_rebuilt_from_history_alone() -> None:
    survivors = survivors_from_history(await _decoded(HERE / "auto_approved.json"))
    assert survivors.answers == {"item_opened": "Yes", "damage": "Split seam"}
    assert survivors.lookups == ["lookup_order", "lookup_customer_history"]
    assert survivors.closed and survivors.outcome and survivors.outcome.status == "refunded"
    assert survivors.refund.state == "succeeded" and survivors.refund.refund is not None
    assert survivors.order and survivors.order.order_number == "1234"


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


def test_reading_an_encrypted_history_undecoded_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="still encrypted: read it through decoded_history"):
        survivors_from_history(_read(HERE / "escalated.json"))

"""Replay: committed Event Histories replay cleanly; a reordered Workflow does not.

tests/histories/*.json are the current Workflow's paths (recorded by tests/histories/record.py),
encrypted with the tests' codec key (harness/codec.py) as every history written since the
codec is. tests/histories/before-issue-9/ holds histories recorded before issue 9 changed the
Workflow's commands: conversations that were running at that deploy, which must still replay. They
were recorded before the payload codec existed (plain payloads), except `*_encrypted.json`,
recorded between the codec and issue 9. tests/histories/before-issue-10/ holds every path as
recorded just before issue 10 made the short steps local activities (regular Activities there).
tests/histories/before-local-posts/ holds every path as recorded just before posts were first tried
inside the workflow task (every post a regular Activity there). tests/histories/before-fewer-steps/
holds every path as recorded just before the outcome was tried there too and the offline policy's
lookups ran together (the outcome a regular Activity, one lookup a turn).
tests/histories/before-compression/ holds every path as recorded just before the codec compressed
payloads (the Workflow is the same: they prove that payloads sealed uncompressed still decode).
tests/histories/before-rules/ holds every path as recorded just before every decision went through
the refund rules (a decider's decision taken as it was).
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

from agent import workflow as workflow_module
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
from agent.workflow import WORKFLOW_TYPE, RefundConversation
from harness.codec import TEST_CONVERTER, TEST_KEY, codec_payloads
from worker.sandbox import CompiledOnceSandboxRunner

ROOT = Path(__file__).parent / "histories"
# Every committed history: the current Workflow's paths, and in before-* folders the histories
# recorded before a Workflow change (conversations that were running at that deploy).
HISTORIES = sorted(ROOT.rglob("*.json"))
BEFORE_ISSUE_9 = ROOT / "before-issue-9"
BEFORE_ISSUE_10 = ROOT / "before-issue-10"
BEFORE_LOCAL_POSTS = ROOT / "before-local-posts"
BEFORE_FEWER_STEPS = ROOT / "before-fewer-steps"
BEFORE_COMPRESSION = ROOT / "before-compression"
BEFORE_RULES = ROOT / "before-rules"
# The steps issue 10 made local activities (the decide step only with the offline policy).
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
    """A Replayer that runs conversations as the Worker does: the same converter and runner."""
    return Replayer(
        workflows=[workflow_class],
        data_converter=TEST_CONVERTER,
        workflow_runner=CompiledOnceSandboxRunner(),
    )


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


def test_there_are_committed_histories() -> None:
    before = {p.stem for p in BEFORE_ISSUE_9.glob("*.json")}
    assert before >= {"auto_approved", "escalated", "reoffered", "declined", "refunded_twice"}
    assert before >= {"auto_approved_encrypted", "escalated_encrypted"}
    current = {p.stem for p in ROOT.glob("*.json")}
    recorded_before = {name.removesuffix("_encrypted") for name in before}
    assert current >= recorded_before | {"raced", "stale_click", "refund_failed"}
    # Every path as it was just before issue 10, and more since: the model with local lookups,
    # a message written while the outcome was being posted.
    before_rules = {p.stem for p in BEFORE_RULES.glob("*.json")}
    assert before_rules == current - {"model_overruled"}
    before_10 = {p.stem for p in BEFORE_ISSUE_10.glob("*.json")}
    assert before_10 == before_rules - {"model_decided", "late_message"}
    assert {p.stem for p in BEFORE_LOCAL_POSTS.glob("*.json")} == before_rules
    assert {p.stem for p in BEFORE_FEWER_STEPS.glob("*.json")} == before_rules
    assert {p.stem for p in BEFORE_COMPRESSION.glob("*.json")} == before_rules


@pytest.mark.parametrize("path", sorted(BEFORE_ISSUE_9.glob("*.json")), ids=_name)
async def test_a_conversation_running_before_issue_9_replays_on_the_new_workflow(
    path: Path,
) -> None:
    """Recorded with the Workflow as it was before issue 9 (no escalation rounds, no edits, the
    owner's raw text on a failed refund, silence on a model failure): every workflow.patched
    branch must take the old path here, or replay fails with a nondeterminism error."""
    replayer = _replayer(RefundConversation)
    history = await _load(path)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None
    assert not any(e.HasField("marker_recorded_event_attributes") for e in history.events), (
        "a history recorded before the patches holds no patch marker"
    )


@pytest.mark.parametrize("path", sorted(BEFORE_ISSUE_10.glob("*.json")), ids=_name)
async def test_a_conversation_running_before_issue_10_replays_with_regular_activities(
    path: Path,
) -> None:
    """Recorded just before issue 10 (every short step a regular Activity): the new Workflow
    must take the same commands again, so workflow.patched(PATCH_LOCAL_STEPS) is False there."""
    history = await _load(path)
    replayer = _replayer(RefundConversation)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None
    assert workflow_module.PATCH_LOCAL_STEPS not in _patch_ids(await _decoded(path))
    assert not _local_steps(history)
    assert SHORT_STEPS & set(step_names(history.events)) or path.stem == "model_refused"


@pytest.mark.parametrize("path", sorted(BEFORE_LOCAL_POSTS.glob("*.json")), ids=_name)
async def test_a_conversation_running_before_local_posts_replays_with_post_activities(
    path: Path,
) -> None:
    """Recorded just before posts were tried inside the workflow task: the new Workflow must
    schedule the same post_to_thread Activities again, so workflow.patched(PATCH_LOCAL_POSTS) is
    False there, and what survives is still read from that history."""
    history = await _load(path)
    replayer = _replayer(RefundConversation)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None
    assert workflow_module.PATCH_LOCAL_POSTS not in _patch_ids(await _decoded(path))
    assert "post_to_thread" not in _local_steps(history)
    assert "post_to_thread" in _regular_steps(history)
    survivors_from_history(await _decoded(path))


@pytest.mark.parametrize("path", sorted(BEFORE_FEWER_STEPS.glob("*.json")), ids=_name)
async def test_a_conversation_running_before_fewer_steps_replays_with_the_old_steps(
    path: Path,
) -> None:
    """Recorded when a decided outcome was still posted by the regular Activity and each lookup
    was a turn of its own: the new Workflow must take the same commands again, so
    workflow.patched(PATCH_FEWER_STEPS) is False there."""
    history = await _load(path)
    replayer = _replayer(RefundConversation)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None
    decoded = await _decoded(path)
    assert workflow_module.PATCH_FEWER_STEPS not in _patch_ids(decoded)
    if path.stem != "model_refused":  # a failure's farewell is no decided outcome
        assert [local for local, kind in _posts(decoded) if kind == "outcome"] == [False]


@pytest.mark.parametrize("path", sorted(ROOT.glob("*.json")), ids=_name)
async def test_a_new_conversation_posts_inside_its_workflow_tasks(path: Path) -> None:
    """Every post of a healthy platform is made by the local try (a marker with its result), the
    decided outcome's too: the run completes in the task that posts it. A message written while it
    is posted still reaches the run (late_message: the server refuses the completion)."""
    posts = _posts(await _decoded(path))
    assert (True, "question") in posts or path.stem in {"refunded_twice", "raced"}, posts
    assert posts and all(local for local, _kind in posts), posts
    assert "outcome" in {kind for _local, kind in posts}, posts


def _posts(history: WorkflowHistory) -> list[tuple[bool, str]]:
    """(made by the local try, kind) of every post in a decoded history, in order."""
    return [
        (step.local, message.kind)
        for step in steps_of(history.events, TEST_CONVERTER)
        if (message := posted_message(step))
    ]


@pytest.mark.parametrize("path", sorted(ROOT.glob("*.json")), ids=_name)
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


@pytest.mark.parametrize(
    "path", [p for p in sorted(ROOT.glob("*.json")) if not p.stem.startswith("model_")], ids=_name
)
async def test_the_offline_policy_reads_the_order_and_the_history_in_one_turn(path: Path) -> None:
    """Both lookups run together: no decide step between them (the live model still chooses one
    lookup a turn). Read in the order the Workflow scheduled them, whichever finished first."""
    steps = step_names(_read(path).events)
    first = steps.index("lookup_order")
    assert steps[first : first + 2] == ["lookup_order", "lookup_customer_history"], steps
    assert workflow_module.PATCH_FEWER_STEPS in _patch_ids(await _decoded(path))


def test_steps_read_back_in_the_order_they_were_scheduled_whichever_finished_first() -> None:
    # The two lookups of one turn record their markers as they finish; swap them, as a run whose
    # history lookup finished first records them, and the reading must not change.
    events = list(_read(ROOT / "auto_approved.json").events)
    lookups = [i for i, e in enumerate(events) if "lookup_" in str(local_activity(e))]
    assert len(lookups) == 2 and lookups[1] == lookups[0] + 1
    first, second = lookups
    swapped = [*events[:first], events[second], events[first], *events[second + 1 :]]
    assert step_names(swapped) == step_names(events)
    assert step_names(events)[5:7] == ["lookup_order", "lookup_customer_history"]


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


async def test_every_patch_has_a_recorded_history_that_takes_it() -> None:
    patches = {
        value
        for name, value in vars(workflow_module).items()
        if name.startswith("PATCH_") and isinstance(value, str)
    }
    # Decoded: a patch marker's details are payloads, encrypted like every other. The ids before
    # PATCH_FEWER_STEPS are taken by the histories recorded before it (a new run implies them).
    taken = set().union(*[_patch_ids(await _decoded(p)) for p in HISTORIES])
    assert patches and taken == patches


@pytest.mark.parametrize("path", sorted(ROOT.glob("*.json")), ids=_name)
async def test_a_new_conversation_records_two_patch_markers(path: Path) -> None:
    """PATCH_FEWER_STEPS implies every change before it, PATCH_RULES is its own: two markers and
    two search-attribute upserts a conversation, not one of each per change."""
    history = await _decoded(path)
    # A run whose model refused the call ends before any decision reaches the rules.
    ruled = path.stem != "model_refused"
    taken = {workflow_module.PATCH_FEWER_STEPS} | (
        {workflow_module.PATCH_RULES} if ruled else set()
    )
    assert _patch_ids(history) == taken
    markers = [
        e for e in history.events if "patch-data" in e.marker_recorded_event_attributes.details
    ]
    upserts = [
        e
        for e in history.events
        if e.HasField("upsert_workflow_search_attributes_event_attributes")
    ]
    assert len(markers) == len(upserts) == len(taken)


@pytest.mark.parametrize("path", HISTORIES, ids=_name)
async def test_committed_history_replays_cleanly(path: Path) -> None:
    replayer = _replayer(RefundConversation)
    result = await replayer.replay_workflow(await _load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None


@pytest.mark.parametrize("path", HISTORIES, ids=_name)
async def test_reordered_workflow_fails_replay(path: Path) -> None:
    replayer = _replayer(ReorderedConversation)
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(await _load(path))


async def test_the_loser_of_a_race_reads_already_refunded_from_history() -> None:
    survivors = survivors_from_history(await _decoded(ROOT / "raced.json"))
    assert survivors.closed and survivors.outcome and survivors.outcome.status == "denied"
    assert survivors.refund.state == "already_refunded"
    assert survivors.refund.refund and survivors.refund.refund.earlier is not None


@pytest.mark.parametrize(
    "path",
    [
        BEFORE_ISSUE_9 / "auto_approved.json",
        BEFORE_ISSUE_9 / "auto_approved_encrypted.json",
        BEFORE_ISSUE_10 / "auto_approved.json",
        BEFORE_LOCAL_POSTS / "auto_approved.json",
        BEFORE_COMPRESSION / "auto_approved.json",
        BEFORE_FEWER_STEPS / "auto_approved.json",
        ROOT / "auto_approved.json",
    ],
    ids=_name,
)
async def test_what_survives_is_rebuilt_from_history_alone(path: Path) -> None:
    survivors = survivors_from_history(await _decoded(path))
    assert survivors.answers == {"item_opened": "Yes", "damage": "Split seam"}
    assert survivors.lookups == ["lookup_order", "lookup_customer_history"]
    assert survivors.closed and survivors.outcome and survivors.outcome.status == "refunded"
    assert survivors.refund.state == "succeeded" and survivors.refund.refund is not None
    assert survivors.order and survivors.order.order_number == "1234"


def test_histories_are_ciphertext_and_compressed_since_each_existed() -> None:
    for path in HISTORIES:
        events = _read(path).events
        encodings = {p.metadata["encoding"] for e in events for p in codec_payloads(e)}
        plain = path.parent == BEFORE_ISSUE_9 and not path.stem.endswith("_encrypted")
        assert (encodings == {ENCODING}) is not plain, (_name(path), encodings)
        compressed = {COMPRESSION_METADATA in p.metadata for e in events for p in codec_payloads(e)}
        # Histories recorded since compression: every payload compressed (all are JSON the
        # dictionary knows). Before it: none.
        since = path.parent in (ROOT, BEFORE_FEWER_STEPS, BEFORE_RULES)
        assert compressed == ({True} if since else {False}), _name(path)
    # The local activities' results are among them.
    escalated = _read(ROOT / "escalated.json").events
    results = [e for e in escalated if "result" in e.marker_recorded_event_attributes.details]
    assert len(results) == 15  # decide steps, lookups, the rules, the grant read, local posts
    assert all(p.metadata["encoding"] == ENCODING for e in results for p in codec_payloads(e))


async def test_replay_tooling_without_the_key_fails_in_one_line() -> None:
    stranger = data_converter([CodecKey.generate("not-the-tests-key")])
    with pytest.raises(MissingCodecKey) as missing:
        await _load(ROOT / "escalated.json", stranger)
    assert str(missing.value).startswith(
        f"Event History is encrypted with codec key {TEST_KEY.key_id!r}"
    )


def test_reading_an_encrypted_history_undecoded_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="still encrypted: read it through decoded_history"):
        survivors_from_history(_read(ROOT / "escalated.json"))

"""Replay: committed Event Histories replay cleanly; a reordered Workflow does not.

tests/histories/*.json are the current Workflow's paths (recorded by tests/histories/record.py);
tests/histories/before-issue-9/ holds histories recorded before issue 9 changed the Workflow's
commands: conversations that were running at that deploy, which must still replay.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from agent import workflow as workflow_module
from agent.history import survivors_from_history
from agent.models import ConversationStart, DecideInput, LookupCustomerInput
from agent.temporal_client import DATA_CONVERTER
from agent.workflow import WORKFLOW_TYPE, RefundConversation

ROOT = Path(__file__).parent / "histories"
# Every committed history: the current Workflow's paths, and in before-* folders the histories
# recorded before a Workflow change (conversations that were running at that deploy).
HISTORIES = sorted(ROOT.rglob("*.json"))
BEFORE_ISSUE_9 = ROOT / "before-issue-9"


def _load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


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
    current = {p.stem for p in ROOT.glob("*.json")}
    assert current >= before | {"raced", "stale_click", "refund_failed"}


@pytest.mark.parametrize("path", sorted(BEFORE_ISSUE_9.glob("*.json")), ids=_name)
async def test_a_conversation_running_before_issue_9_replays_on_the_new_workflow(
    path: Path,
) -> None:
    """Recorded with the Workflow as it was before issue 9 (no escalation rounds, no edits, the
    owner's raw text on a failed refund, silence on a model failure): every workflow.patched
    branch must take the old path here, or replay fails with a nondeterminism error."""
    replayer = Replayer(workflows=[RefundConversation], data_converter=DATA_CONVERTER)
    result = await replayer.replay_workflow(_load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None
    assert not any(e.HasField("marker_recorded_event_attributes") for e in _load(path).events), (
        "a history recorded before the patches holds no patch marker"
    )


def _patch_ids(history: WorkflowHistory) -> set[str]:
    found = set()
    for event in history.events:
        if event.HasField("marker_recorded_event_attributes"):
            for payloads in event.marker_recorded_event_attributes.details.values():
                for payload in payloads.payloads:
                    found.add(json.loads(payload.data)["id"])
    return found


def test_every_patch_has_a_recorded_history_that_takes_it() -> None:
    patches = {
        value
        for name, value in vars(workflow_module).items()
        if name.startswith("PATCH_") and isinstance(value, str)
    }
    taken = set().union(*(_patch_ids(_load(p)) for p in ROOT.glob("*.json")))
    assert patches and taken == patches


@pytest.mark.parametrize("path", HISTORIES, ids=_name)
async def test_committed_history_replays_cleanly(path: Path) -> None:
    replayer = Replayer(workflows=[RefundConversation], data_converter=DATA_CONVERTER)
    result = await replayer.replay_workflow(_load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None


@pytest.mark.parametrize("path", HISTORIES, ids=_name)
async def test_reordered_workflow_fails_replay(path: Path) -> None:
    replayer = Replayer(workflows=[ReorderedConversation], data_converter=DATA_CONVERTER)
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(_load(path))


def test_the_loser_of_a_race_reads_already_refunded_from_history() -> None:
    survivors = survivors_from_history(_load(ROOT / "raced.json"))
    assert survivors.closed and survivors.outcome and survivors.outcome.status == "denied"
    assert survivors.refund.state == "already_refunded"
    assert survivors.refund.refund and survivors.refund.refund.earlier is not None


def test_what_survives_is_rebuilt_from_history_alone() -> None:
    survivors = survivors_from_history(_load(BEFORE_ISSUE_9 / "auto_approved.json"))
    assert survivors.answers == {"item_opened": "Yes", "damage": "Split seam"}
    assert survivors.lookups == ["lookup_order", "lookup_customer_history"]
    assert survivors.closed and survivors.outcome and survivors.outcome.status == "refunded"
    assert survivors.refund.state == "succeeded" and survivors.refund.refund is not None
    assert survivors.order and survivors.order.order_number == "1234"

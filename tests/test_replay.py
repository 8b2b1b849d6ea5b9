"""Replay: committed Event Histories replay cleanly; a reordered Workflow does not."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

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


def test_what_survives_is_rebuilt_from_history_alone() -> None:
    survivors = survivors_from_history(_load(BEFORE_ISSUE_9 / "auto_approved.json"))
    assert survivors.answers == {"item_opened": "Yes", "damage": "Split seam"}
    assert survivors.lookups == ["lookup_order", "lookup_customer_history"]
    assert survivors.closed and survivors.outcome and survivors.outcome.status == "refunded"
    assert survivors.refund.state == "succeeded" and survivors.refund.refund is not None
    assert survivors.order and survivors.order.order_number == "1234"

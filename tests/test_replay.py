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

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def _load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


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
    assert {p.name for p in HISTORIES} >= {"auto_approved.json", "escalated.json"}


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_committed_history_replays_cleanly(path: Path) -> None:
    replayer = Replayer(workflows=[RefundConversation], data_converter=DATA_CONVERTER)
    result = await replayer.replay_workflow(_load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_reordered_workflow_fails_replay(path: Path) -> None:
    replayer = Replayer(workflows=[ReorderedConversation], data_converter=DATA_CONVERTER)
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(_load(path))


def test_what_survives_is_rebuilt_from_history_alone() -> None:
    survivors = survivors_from_history(
        _load(Path(__file__).parent / "histories" / "auto_approved.json")
    )
    assert survivors.answers == {"item_opened": "Yes", "damage": "Split seam"}
    assert survivors.lookups == ["lookup_order", "lookup_customer_history"]
    assert survivors.closed and survivors.outcome and survivors.outcome.status == "refunded"
    assert survivors.refund.state == "succeeded" and survivors.refund.refund is not None
    assert survivors.order and survivors.order.order_number == "1234"

"""Replay: committed Event Histories replay cleanly; a reordered Workflow does not.

`*_before_codec.json` were recorded before the payload codec existed (plain payloads): they replay
with the codec on, as conversations running at its deploy carried on. The others are encrypted
with the tests' codec key (tests/support/codec.py), as every history written since is.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from agent.codec import ENCODING, CodecKey, MissingCodecKey
from agent.decoded_history import decoded_history
from agent.history import survivors_from_history
from agent.models import ConversationStart, DecideInput, LookupCustomerInput
from agent.temporal_client import data_converter
from agent.workflow import WORKFLOW_TYPE, RefundConversation
from tests.support.codec import TEST_CONVERTER, TEST_KEY, all_payloads

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def _read(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


async def _load(path: Path, converter: DataConverter = TEST_CONVERTER) -> WorkflowHistory:
    history = _read(path)
    # A history this converter cannot decrypt fails here, naming the key id; inside the Replayer
    # it would be an opaque workflow task failure ("Encoded failure").
    await decoded_history(history, converter)
    return history


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
    assert {p.name for p in HISTORIES} >= {
        "auto_approved.json",
        "escalated.json",
        "auto_approved_before_codec.json",
        "escalated_before_codec.json",
    }


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_committed_history_replays_cleanly(path: Path) -> None:
    replayer = Replayer(workflows=[RefundConversation], data_converter=TEST_CONVERTER)
    result = await replayer.replay_workflow(await _load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_reordered_workflow_fails_replay(path: Path) -> None:
    replayer = Replayer(workflows=[ReorderedConversation], data_converter=TEST_CONVERTER)
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(await _load(path))


@pytest.mark.parametrize("name", ["auto_approved", "auto_approved_before_codec"])
async def test_what_survives_is_rebuilt_from_history_alone(name: str) -> None:
    history = await _load(Path(__file__).parent / "histories" / f"{name}.json")
    survivors = survivors_from_history(await decoded_history(history, TEST_CONVERTER))
    assert survivors.answers == {"item_opened": "Yes", "damage": "Split seam"}
    assert survivors.lookups == ["lookup_order", "lookup_customer_history"]
    assert survivors.closed and survivors.outcome and survivors.outcome.status == "refunded"
    assert survivors.refund.state == "succeeded" and survivors.refund.refund is not None
    assert survivors.order and survivors.order.order_number == "1234"


def test_histories_recorded_since_the_codec_are_ciphertext() -> None:
    for path in HISTORIES:
        history = _read(path)
        encodings = {p.metadata["encoding"] for e in history.events for p in all_payloads(e)}
        encrypted = not path.stem.endswith("_before_codec")
        assert (encodings == {ENCODING}) is encrypted, (path.name, encodings)


async def test_replay_tooling_without_the_key_fails_in_one_line() -> None:
    stranger = data_converter([CodecKey.generate("not-the-tests-key")])
    with pytest.raises(MissingCodecKey) as missing:
        await _load(Path(__file__).parent / "histories" / "escalated.json", stranger)
    assert str(missing.value).startswith(
        f"Event History is encrypted with codec key {TEST_KEY.key_id!r}"
    )


def test_reading_an_encrypted_history_undecoded_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="still encrypted: read it through decoded_history"):
        survivors_from_history(_read(Path(__file__).parent / "histories" / "escalated.json"))

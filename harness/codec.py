"""The tests' codec key: every test client and Worker encrypts with it, as a deployment with
CODEC_KEYS set does.

It is fixed so that the histories recorded with it (tests/histories/) replay in any checkout; it
protects nothing but test data. `refund-bot run` and `refund-bot demo` started by tests with no
CODEC_KEYS generate their own key into their data directory instead, as they do for a user.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from google.protobuf.message import Message
from pydantic import SecretStr
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory

from agent.codec import CodecKey
from agent.settings import AgentSettings
from agent.temporal_client import data_converter
from worker.conversation_metrics import TURN_HEADER

TEST_KEY = CodecKey("tests-1", hashlib.sha256(b"refund-bot tests: not a secret").digest())
TEST_KEYS = [TEST_KEY]
TEST_CONVERTER = data_converter(TEST_KEYS)
# For child processes (the Worker, the supervisor tests' dummy Worker): the same key, as a setting.
TEST_CODEC_ENV = {"CODEC_KEYS": TEST_KEY.entry()}


def with_test_keys(settings: AgentSettings) -> AgentSettings:
    return settings.model_copy(update={"codec_keys": SecretStr(TEST_KEY.entry())})


def all_payloads(message: Message) -> Iterator[Payload]:
    """Every Payload anywhere in a proto message (a history event, say), maps and lists included."""
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if isinstance(value, Message):
            yield from all_payloads(value)
        else:  # a repeated field or a map
            items = value.values() if hasattr(value, "values") else value
            for item in items:
                if isinstance(item, Message):
                    yield from all_payloads(item)


def raw_bytes(history: WorkflowHistory) -> bytes:
    """A history as the server stores it, for searching: every event serialized."""
    return b"".join(event.SerializeToString() for event in history.events)


# What the SDK's core writes itself, never through the codec: a workflow.patched marker's id, a
# local activity marker's own data (activity type, attempt, times) and the TemporalChangeVersion
# search attribute listing the patch ids (the server indexes it). None holds customer data; a local
# activity's result (its marker's "result") is a payload like any other.
_CORE_DETAILS = ("patch-data", "data")


def codec_payloads(event: HistoryEvent) -> Iterator[Payload]:
    """The payloads of an event that go through the payload codec (all but the core-written, and
    search attributes, which the server must read to index them: never customer data)."""
    if event.HasField("upsert_workflow_search_attributes_event_attributes"):
        return
    if event.HasField("workflow_execution_started_event_attributes"):
        without = HistoryEvent()
        without.CopyFrom(event)
        without.workflow_execution_started_event_attributes.ClearField("search_attributes")
        yield from all_payloads(without)
        return
    if event.HasField("activity_task_scheduled_event_attributes"):
        header = event.activity_task_scheduled_event_attributes.header
        if TURN_HEADER in header.fields:
            # The Worker's turn clock (worker/conversation_metrics.py): when the turn began and
            # which Signal began it, written plain by design (a header is not the codec's).
            without = HistoryEvent()
            without.CopyFrom(event)
            del without.activity_task_scheduled_event_attributes.header.fields[TURN_HEADER]
            yield from all_payloads(without)
            return
    if event.HasField("marker_recorded_event_attributes"):
        for key, payloads in event.marker_recorded_event_attributes.details.items():
            if key not in _CORE_DETAILS:
                yield from payloads.payloads
        return
    yield from all_payloads(event)

"""Reading raw Event History in tests, drills and benchmarks (the product reads the memo instead).

local_activity(event) -> a local activity marker's own data; step_names(events); and
customer_message(event, converter) -> the customer's message a Signal or an Update delivered
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter

from agent.intake import MESSAGE_SIGNAL, MESSAGE_UPDATE
from agent.models import CustomerMessage

# What the SDK's core names a local activity's marker; its "data" detail is plain JSON.
LOCAL_ACTIVITY_MARKER = "core_local_activity"


def local_activity(event: HistoryEvent) -> dict[str, Any] | None:
    """A local activity marker's own data (activity_type, seq, ...); None for other events."""
    if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
        return None
    marker = event.marker_recorded_event_attributes
    if marker.marker_name != LOCAL_ACTIVITY_MARKER:
        return None  # a workflow.patched marker
    data: dict[str, Any] = json.loads(marker.details["data"].payloads[0].data)
    return data


def step_names(events: Sequence[HistoryEvent]) -> list[str]:
    """The name of every step, Activity or local activity, in the order they were recorded."""
    names = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names.append(event.activity_task_scheduled_event_attributes.activity_type.name)
        elif (meta := local_activity(event)) is not None:
            names.append(meta["activity_type"])
    return names


def customer_message(event: HistoryEvent, converter: DataConverter) -> CustomerMessage | None:
    """The customer's message a decoded event delivered (a Signal, or an accepted Update)."""
    payloads: Any = None
    if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
        signaled = event.workflow_execution_signaled_event_attributes
        if signaled.signal_name == MESSAGE_SIGNAL:
            payloads = signaled.input.payloads
    elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
        request = event.workflow_execution_update_accepted_event_attributes.accepted_request
        if request.input.name == MESSAGE_UPDATE:
            payloads = request.input.args.payloads
    if payloads is None:
        return None
    message: CustomerMessage = converter.payload_converter.from_payloads(
        list(payloads), [CustomerMessage]
    )[0]
    return message

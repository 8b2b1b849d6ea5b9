"""What the benchmarks read from a history: a failed workflow task says what its Worker said.

WorkflowTaskFailed (its failure encrypted by the codec: "Encoded failure" in the history)
  -> bench.read_failures -> bench.open_recovery.retries_in -> "failed (cause: message)"
"""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent, WorkflowTaskFailedEventAttributes
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from bench import read_failures
from bench.open_recovery import retries_in

DEADLOCK = "[TMPRL1101] Potential deadlock detected: workflow didn't yield within 2 second(s)."


async def test_a_failed_tasks_message_is_read_through_the_codec(client: Client) -> None:
    failure = Failure()
    await client.data_converter.encode_failure(ApplicationError(DEADLOCK), failure)
    assert failure.message == "Encoded failure"  # what the history holds: the codec's ciphertext
    signaled = HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
    failed = HistoryEvent(
        event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
        workflow_task_failed_event_attributes=WorkflowTaskFailedEventAttributes(
            cause=WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE,
            failure=failure,
        ),
    )
    # The opening's Signal, the reply's, then the reply's task failing.
    events = [signaled, signaled, failed]
    await read_failures(client, events)
    assert retries_in(events) == {
        f"failed (workflow_worker_unhandled_failure: {DEADLOCK[:100]})": 1
    }

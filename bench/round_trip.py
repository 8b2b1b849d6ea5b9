"""The bare Temporal round trip a turn is compared with: a Signal, a workflow task, Activities.

    Signal `ping` (or Update `ping_now`) -> workflow task -> `echo` Activity x N (in sequence)
        -> waits for the next ping

No payload codec work beyond the client's converter, no stores, no chat: what one turn costs
Temporal itself on the same server, so a refund-bot turn can be read as a multiple of it.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

WORKFLOW_TYPE = "BareRoundTrip"
ACTIVITY_TYPE = "echo"


@activity.defn(name=ACTIVITY_TYPE)
async def echo(value: int) -> int:
    return value


@workflow.defn(name=WORKFLOW_TYPE)
class BareRoundTrip:
    def __init__(self) -> None:
        self._pings: list[int] = []  # EXECUTION STATE: Signals not yet answered

    @workflow.signal
    def ping(self, value: int) -> None:
        self._pings.append(value)

    @workflow.update
    def ping_now(self, value: int) -> None:
        # The same as `ping`, as an Update: accepted and completed at once, the Activities after.
        self._pings.append(value)

    @workflow.run
    async def run(self, activities: int) -> None:
        while True:
            await workflow.wait_condition(lambda: bool(self._pings))  # DURABLE WAIT
            value = self._pings.pop(0)
            if value < 0:
                return  # the driver is done with it
            for _ in range(activities):
                await workflow.execute_activity(
                    echo, value, start_to_close_timeout=timedelta(seconds=30)
                )

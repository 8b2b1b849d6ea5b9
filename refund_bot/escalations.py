"""Escalations waiting for a support agent, and how long the oldest has waited: for /metrics.

    visibility (RefundBotStage = waiting_for_approval, RefundBotWaitingSince) -> count, oldest age

The same query /refund-queue answers with (agent.visibility.escalations_waiting): one visibility
call a scrape, no Worker, no history read, no copy of the queue kept anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from temporalio.client import Client

from agent.visibility import escalations_waiting


@dataclass(frozen=True)
class Waiting:
    count: int
    oldest_seconds: float  # 0 when none waits
    reminded: int  # of them, how many have had their approvers reminded


@dataclass
class EscalationWatch:
    client: Client

    async def waiting(self) -> Waiting:
        found = await escalations_waiting(self.client)
        now = datetime.now(UTC)
        ages = [(now - w.since).total_seconds() for w in found if w.since is not None]
        return Waiting(
            count=len(found),
            oldest_seconds=max(max(ages, default=0.0), 0.0),
            reminded=sum(w.reminded for w in found),
        )

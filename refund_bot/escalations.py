"""Escalations waiting for a support agent, and how long the oldest has waited: for /metrics.

    visibility: the open conversations -> describe each (its history's length, no payload read)
        -> one whose history grew since the last look: Event History read and decoded
           (agent.history.escalation_posted_at: is an escalation unanswered, since when)
        -> how many wait, the oldest one's age

Where a conversation stands is read from Event History, as /refund-status reads it: no Workflow
change, no Worker needed. A conversation waiting on a person does not change, so after the first
look each scrape costs one describe per open conversation, and a history is read again only when
it has grown. The reading is kept for REFRESH_EVERY; one that takes longer than READ_TIMEOUT
keeps what it has learned so far (it goes on from there at the next scrape).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from temporalio.client import Client

from agent.decoded_history import decoded_history
from agent.history import escalation_posted_at
from agent.workflow import WORKFLOW_TYPE

log = logging.getLogger(__name__)

REFRESH_EVERY = 30.0  # seconds: an escalation's age matters in hours
READ_TIMEOUT = 5.0  # seconds a scrape may spend reading; the rest is read at the next one
AT_ONCE = 16  # describes and history reads in flight at once
OPEN = f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'"


@dataclass(frozen=True)
class Waiting:
    count: int
    oldest_seconds: float  # 0 when none waits


@dataclass
class EscalationWatch:
    client: Client
    # Workflow ID -> (history length when read, when its open escalation was posted, or None).
    _seen: dict[str, tuple[int, datetime | None]] = field(default_factory=dict)
    _read_at: float = 0.0
    _last: Waiting = Waiting(0, 0.0)

    async def waiting(self) -> Waiting:
        if time.monotonic() - self._read_at >= REFRESH_EVERY:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(READ_TIMEOUT):
                    await self._read()
            self._read_at = time.monotonic()
            now = datetime.now(UTC)
            since = [at for _, at in self._seen.values() if at is not None]
            oldest = max(((now - at).total_seconds() for at in since), default=0.0)
            self._last = Waiting(len(since), max(oldest, 0.0))
        return self._last

    async def _read(self) -> None:
        open_ids = [execution.id async for execution in self.client.list_workflows(OPEN)]
        for gone in set(self._seen) - set(open_ids):
            del self._seen[gone]  # closed: it waits for no one
        gate = asyncio.Semaphore(AT_ONCE)
        await asyncio.gather(*(self._look(workflow_id, gate) for workflow_id in open_ids))

    async def _look(self, workflow_id: str, gate: asyncio.Semaphore) -> None:
        async with gate:
            handle = self.client.get_workflow_handle(workflow_id)
            try:
                length = (await handle.describe()).history_length
                known = self._seen.get(workflow_id)
                if known is not None and known[0] == length:
                    return
                history = await decoded_history(
                    await handle.fetch_history(), self.client.data_converter
                )
                posted = escalation_posted_at(history, self.client.data_converter)
            except Exception as err:  # closed meanwhile, a key this bot lacks: not counted now
                log.debug("escalations: could not read %s: %s", workflow_id, err)
                return
            self._seen[workflow_id] = (length, posted)

"""How many payload bytes a conversation writes to Event History.

Working memory is re-sent to decide_next_step on every turn, so history grows with the square of
the turn count; MAX_TURNS bounds it. This counts the bytes of every payload (data and metadata) in
the committed histories and in the offline policy's longest conversation (9 decide turns, one
under MAX_TURNS): the order number found only on the third ask, two questions, three lookups, an
escalation approved, the refund.

    uv run python -m bench.history_size
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowHistory

from agent.workflow import MAX_TURNS
from tests.support.conversation import SUPPORT, LocalConversation
from tests.support.inproc import standalone_agent
from worker.exit import exit_now

HISTORIES = Path(__file__).parent.parent / "tests" / "histories"


def payload_bytes(message: Message) -> int:
    if isinstance(message, Payload):
        return len(message.data) + sum(len(k) + len(v) for k, v in message.metadata.items())
    total = 0
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if isinstance(value, Message):
            total += payload_bytes(value)
        else:  # a repeated field or a map
            items = value.values() if hasattr(value, "values") else value
            total += sum(payload_bytes(v) for v in items if isinstance(v, Message))
    return total


def report(name: str, history: WorkflowHistory) -> None:
    size = sum(payload_bytes(event) for event in history.events)
    print(f"  {name:<28} {len(history.events):4d} events  {size:6,d} payload bytes", flush=True)


async def longest_conversation() -> tuple[int, WorkflowHistory]:
    async with standalone_agent() as (client, threads, queue):
        conv = LocalConversation(client, threads, queue)
        handle = await conv.open("I want my money back")
        for answer in ("the green one", "the big one, sorry", "4500", "Yes", "Split seam"):
            await conv.next_bot_message()
            await conv.reply(answer)
        await conv.next_bot_message()  # the escalation
        await conv.click("approve", SUPPORT)
        outcome = await handle.result()
        assert outcome.status == "refunded", outcome
        history = await handle.fetch_history()
        turns = sum(
            1
            for e in history.events
            if e.activity_task_scheduled_event_attributes.activity_type.name == "decide_next_step"
        )
        return turns, history


async def main() -> None:
    print("Payload bytes written to Event History:")
    for path in sorted(HISTORIES.glob("*.json")):
        report(path.stem, WorkflowHistory.from_json(path.stem, path.read_text()))
    turns, history = await longest_conversation()
    report(f"longest: {turns} of {MAX_TURNS} turns", history)


if __name__ == "__main__":
    asyncio.run(main())
    exit_now(0)

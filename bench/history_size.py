"""How many payload bytes a conversation writes to Event History.

Since issue 10 the offline policy's decide step is a local activity: only its result is recorded,
not the working memory it read, so history grows linearly with the turns. The model's decide step
(AGENT_DECIDER=openai) stays an Activity whose recorded input is the whole working memory: that
path grows with the square of the turns, bounded by MAX_TURNS. This counts the bytes of every
payload (data and metadata), as stored (encrypted by the payload codec) and decrypted, in the
committed histories and in the offline policy's longest conversation (9 decide turns, one under
MAX_TURNS): the order number found only on the third ask, two questions, three lookups, an
escalation approved, the refund.

    uv run python -m bench.history_size
"""

from __future__ import annotations

from pathlib import Path

from temporalio.client import WorkflowHistory

from agent.decoded_history import decoded_history
from agent.history import step_names
from agent.workflow import MAX_TURNS
from bench import run_benchmark
from tests.support.codec import TEST_CONVERTER, all_payloads
from tests.support.conversation import SUPPORT, LocalConversation
from tests.support.inproc import standalone_agent

HISTORIES = Path(__file__).parent.parent / "tests" / "histories"


def payload_bytes(history: WorkflowHistory) -> int:
    return sum(
        len(p.data) + sum(len(k) + len(v) for k, v in p.metadata.items())
        for event in history.events
        for p in all_payloads(event)
    )


async def report(name: str, history: WorkflowHistory) -> None:
    stored = payload_bytes(history)
    plain = payload_bytes(await decoded_history(history, TEST_CONVERTER))
    print(
        f"  {name:<28} {len(history.events):4d} events  {stored:6,d} payload bytes stored "
        f"({plain:,d} decrypted)",
        flush=True,
    )


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
        return step_names(history.events).count("decide_next_step"), history


async def main() -> None:
    print("Payload bytes written to Event History:")
    for path in sorted(HISTORIES.glob("*.json")):
        await report(path.stem, WorkflowHistory.from_json(path.stem, path.read_text()))
    turns, history = await longest_conversation()
    await report(f"longest: {turns} of {MAX_TURNS} turns", history)


if __name__ == "__main__":
    run_benchmark(main())

"""Record the committed Event History that tests/test_replay.py replays.

Run it when the Workflow changes on purpose (and version the change with workflow.patched):
    uv run python -m tests.histories.record
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.conversation import SUPPORT, LocalConversation
from tests.support.inproc import standalone_agent

HERE = Path(__file__).parent


async def record() -> None:
    async with standalone_agent() as (client, threads, tq):
        for name, text, approve in (
            ("auto_approved", "please refund order 1234", False),
            ("escalated", "please refund order 4500", True),
        ):
            conv = LocalConversation(client, threads, tq)
            handle = await conv.open(text, hold=True)
            await conv.next_bot_message()
            await conv.reply("Yes")
            await conv.next_bot_message()
            await conv.reply("Split seam")
            if approve:
                await conv.next_bot_message()
                await conv.click("approve", SUPPORT)
            await conv.wait_phase("held_before_refund")
            await handle.signal("release")
            await handle.result()
            history = await handle.fetch_history()
            (HERE / f"{name}.json").write_text(history.to_json())
            print(f"recorded {name}.json ({len(history.events)} events)")


if __name__ == "__main__":
    asyncio.run(record())

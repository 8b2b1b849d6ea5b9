"""Record the committed Event History that tests/test_replay.py replays.

Run it when the Workflow changes on purpose (and version the change with workflow.patched):
    uv run python -m tests.histories.record
The histories are encrypted with the tests' codec key (tests/support/codec.py), as every history
is. It overwrites auto_approved.json and escalated.json: give histories recorded before a change
names of their own first (as *_before_codec.json were), so they keep proving that running
conversations survive the deploy.
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

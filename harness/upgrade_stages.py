"""Open conversations at every stage on a released version's own code, then stop its Worker.

    <tag's worktree>/.venv/bin/python -m harness.upgrade_stages --address A --data-dir D
        --task-queue Q --out F
        -> a Worker of that code on Q -> one conversation per stage, each left at its wait
        -> F: [{stage, workflow_id, thread_id}] (and --histories DIR: each one's Event History)

harness.upgrade copies this file into a worktree of a release's tag and runs it with
that release's interpreter, so it imports only what every supported release has (harness.inproc,
harness.conversation, harness.owner, agent.models). A stage a release does not have (a reminder,
a takeover before 1.1) is left out. harness.upgrade then finishes them on the current code.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client

from agent import models
from agent.settings import AgentSettings
from agent.stores import domain
from bot.local.thread_store import LocalThreadStore
from harness.codec import TEST_CONVERTER
from harness.conversation import SUPPORT, LocalConversation
from harness.inproc import running_worker
from harness.owner import place_like

try:
    from agent.stores.databases import database_for
except ImportError:  # 1.0's module name
    database_for = importlib.import_module("agent.stores.database").database_for

PLUSH, ESPRESSO = domain.SEED_ORDERS[0], domain.SEED_ORDERS[1]  # refunded at once; escalates
ANSWERS = {"Was the package opened?": "Yes", "What was damaged?": "Split seam"}
# Timing exists from 1.1 on: a reminder due in seconds, so the stage is reached in the run.
SOON = timedelta(seconds=2)


async def _answer_until(conv: LocalConversation, kind: str, saying: str = "") -> None:
    """Answer the agent's questions until it posts a message of `kind` (that says `saying`)."""
    while True:
        message = await conv.next_bot_message(timeout=30)
        if message.kind == kind and saying in message.text:
            return
        if message.kind == "question":
            await conv.reply(ANSWERS.get(message.text, "Yes"))


async def _open(conv: LocalConversation, settings: AgentSettings, like: Any, **kw: Any) -> None:
    order = await place_like(settings, like)
    await conv.open(f"please refund order {order.order_number}", **kw)


async def waiting(conv: LocalConversation, settings: AgentSettings) -> None:
    """Asked its first question; the customer has not answered."""
    await _open(conv, settings, PLUSH)
    assert (await conv.next_bot_message(timeout=30)).kind == "question"


async def escalated(conv: LocalConversation, settings: AgentSettings) -> None:
    """Answered; the escalation's Approve / Deny are posted, nobody clicked."""
    await _open(conv, settings, ESPRESSO)
    await _answer_until(conv, "escalation")


async def held(conv: LocalConversation, settings: AgentSettings) -> None:
    """Approved by the rules; held before the refund for a presenter's release."""
    await _open(conv, settings, PLUSH, hold=True)
    await _answer_until(conv, "info", "/refund-release")
    await conv.wait_phase("held_before_refund", timeout=30)


async def reminded(conv: LocalConversation, settings: AgentSettings) -> None:
    """Escalated, and the approvers reminded: the wait for the decision goes on."""
    await _open(conv, settings, ESPRESSO, timing=models.Timing(approval_reminder=SOON))
    await _answer_until(conv, "escalation")
    assert "approvers" in (await conv.next_bot_message(timeout=30)).text


async def customer_reminded(conv: LocalConversation, settings: AgentSettings) -> None:
    """Asked a question, and the silent customer reminded of it."""
    await _open(conv, settings, PLUSH, timing=models.Timing(customer_reminder=SOON))
    assert (await conv.next_bot_message(timeout=30)).kind == "question"
    assert (await conv.next_bot_message(timeout=30)).kind == "info"


async def taken_over(conv: LocalConversation, settings: AgentSettings) -> None:
    """Asked a question, then taken over by a support agent; the customer's answer waits for
    the hand-back."""
    await _open(conv, settings, PLUSH)
    assert (await conv.next_bot_message(timeout=30)).kind == "question"
    assert conv.handle is not None
    await conv.handle.signal("takeover", models.Takeover(actor=SUPPORT, taken=True))
    await conv.next_bot_message(timeout=30)  # "<name> has taken this conversation over"
    await conv.reply("Yes")
    await conv.wait_phase("waiting_for_customer", timeout=30)


STAGES = {
    "waiting": waiting,
    "escalated": escalated,
    "held": held,
    "reminded": reminded,
    "customer_reminded": customer_reminded,
    "taken_over": taken_over,
}


def stages_of_this_release() -> list[str]:
    """The stages this code has: reminders (Timing) and takeovers came with 1.1."""
    later = {"reminded", "customer_reminded", "taken_over"}
    has_them = hasattr(models, "Timing") and hasattr(models, "Takeover")
    return [s for s in STAGES if has_them or s not in later]


async def main(args: argparse.Namespace) -> None:
    client = await Client.connect(args.address, data_converter=TEST_CONVERTER)
    settings = AgentSettings(_env_file=None, data_dir=Path(args.data_dir))
    threads = LocalThreadStore(database_for(settings))
    opened: list[dict[str, str]] = []
    async with running_worker(client, settings, threads, args.task_queue):
        for stage in stages_of_this_release():
            conv = LocalConversation(client, threads, args.task_queue)
            await STAGES[stage](conv, settings)
            assert conv.handle is not None
            opened.append(
                {"stage": stage, "workflow_id": conv.handle.id, "thread_id": conv.thread_id}
            )
            if args.histories:
                history = await conv.handle.fetch_history()
                where = Path(args.histories, f"open_{stage}.json")
                await asyncio.to_thread(where.write_text, history.to_json())
    # The Worker is stopped: every conversation waits at its stage for the next release.
    await asyncio.to_thread(Path(args.out).write_text, json.dumps(opened, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--histories", default="")
    asyncio.run(main(parser.parse_args()))

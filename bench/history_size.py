"""Event History against the number of turns: events and payload bytes per conversation.

    committed histories (tests/histories) -> events, bytes      (what the replay tests hold)
    conversations of 5 to 9 decide turns, one in-process Worker -> events, bytes -> plot

The offline policy takes a turn for each question, lookup and the decision, so the turns are set by
the story: the order number in the opening or asked for (after 0, 1 or 2 answers without one),
then two questions, two lookups and the refund (auto-approved, the plush python: 5 to 8 turns), or
three lookups, an escalation approved by support and the refund (the espresso machine: 6 to 9
turns; MAX_TURNS is 10). Each conversation has a fresh customer like the demo's and a fresh order,
so every one tells its story to the end; the customer answers each question once it is posted.
Payload bytes (data and metadata) are counted as stored, encrypted by the payload codec, and
decrypted. The bytes each extra turn adds are printed: constant means linear growth, growing
means working memory is re-sent on every turn (quadratic). The plot goes to --plot.

With --reference (a checkout of the reference demo, as bench.throughput takes it), one
conversation of bench.throughput's story runs on each side, refund-bot's Worker and the
reference's, and both are drawn at that story's decide turns: the two demos side by side.

    .venv/bin/python -m bench.history_size [--reference PATH [--reference-python PYTHON]]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from matplotlib.ticker import MaxNLocator
from temporalio.client import Client, WorkflowHistory

from agent.decoded_history import decoded_history
from agent.models import Actor, OrderDetails
from agent.settings import DEMO_CUSTOMER, AgentSettings
from agent.stores.databases import database_for
from agent.stores.domain import SEED_ORDERS, DomainStore
from agent.stores.ledger import Ledger
from agent.workflow import MAX_TURNS
from bench import run_benchmark
from bench.plot import axes, default_path, save
from bench.server import embedded_server
from demo.parts import ANSWERS, fresh_demo_account, place_demo_customer
from harness.codec import TEST_CONVERTER, all_payloads, with_test_keys
from harness.conversation import SUPPORT, LocalConversation
from harness.events import step_names
from harness.inproc import running_worker
from refund_bot.wiring import local_thread_store

HISTORIES = Path(__file__).parent.parent / "tests" / "histories"
ESPRESSO = next(order for order in SEED_ORDERS if order.order_number == "4500")
VAGUE = "the green one"
TIMEOUT = 60.0


def payload_bytes(history: WorkflowHistory) -> int:
    return sum(
        len(p.data) + sum(len(k) + len(v) for k, v in p.metadata.items())
        for event in history.events
        for p in all_payloads(event)
    )


@dataclass
class Size:
    name: str
    turns: int
    events: int
    stored: int
    plain: int


async def measure(name: str, history: WorkflowHistory, turns: int | None = None) -> Size:
    """`turns`: the story's decide turns; by default counted from the history's decide steps
    (Activities, or local activities in the newer histories)."""
    turns = turns or step_names(list(history.events)).count("decide_next_step")
    plain = payload_bytes(await decoded_history(history, TEST_CONVERTER))
    size = Size(name, turns, len(history.events), payload_bytes(history), plain)
    print(
        f"  {name:<34} {turns:2d} turns {size.events:4d} events  {size.stored:6,d} payload bytes "
        f"stored ({plain:,d} decrypted)",
        flush=True,
    )
    return size


async def _escalated_order(settings: AgentSettings) -> tuple[Actor, OrderDetails]:
    """A fresh customer like the demo's with an espresso machine to refund (over the limit)."""
    domain = DomainStore(database_for(settings))
    customer = fresh_demo_account()
    customer_id = await domain.place_customer(DEMO_CUSTOMER, customer)
    order = await domain.place_order(replace(ESPRESSO, customer_id=customer_id))
    await Ledger(database_for(settings)).seed_payments(
        [(order.payment_ref, order.amount_cents, order.currency)]
    )
    return customer, order


async def conversation(
    client: Client, settings: AgentSettings, queue: str, escalated: bool, vague: int | None
) -> WorkflowHistory:
    """`vague`: None, the order number is in the opening; else answers without one first."""
    place = _escalated_order if escalated else place_demo_customer
    customer, order = await place(settings)
    conv = LocalConversation(client, local_thread_store(settings), queue, customer=customer)
    if vague is None:
        handle = await conv.open(f"please refund order {order.order_number}")
        replies = list(ANSWERS)
    else:
        handle = await conv.open("I want my money back")
        replies = [VAGUE] * vague + [order.order_number, *ANSWERS]
    for reply in replies:
        await conv.next_bot_message(timeout=TIMEOUT)
        await conv.reply(reply)
    if escalated:
        await conv.next_bot_message(timeout=TIMEOUT)  # the escalation
        await conv.click("approve", SUPPORT)
    outcome = await asyncio.wait_for(handle.result(), TIMEOUT)
    assert outcome.status == "refunded", outcome
    return await handle.fetch_history()


def _turns(escalated: bool, vague: int | None) -> int:
    """The policy's decide turns for a story, counted from the story rather than from its
    history, where a decide step may be a local Activity's marker: one per question (the order
    number's asks, then opened and damage), one for the order and history lookups (read together),
    one for the policy check when escalated, and the decision."""
    asks = 2 + (0 if vague is None else 1 + vague)
    return asks + (2 if escalated else 1) + 1


async def growth() -> list[Size]:
    sizes = []
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        settings = with_test_keys(AgentSettings(_env_file=None, data_dir=data_dir / "agent"))
        async with embedded_server(data_dir / "temporal") as server:
            client = await Client.connect(server.address, data_converter=TEST_CONVERTER)
            threads = local_thread_store(settings)
            async with running_worker(client, settings, threads) as queue:
                for escalated in (False, True):
                    for vague in (None, 0, 1, 2):
                        story = "escalated" if escalated else "auto-approved"
                        asks = "number in opening" if vague is None else f"{vague} vague"
                        history = await conversation(client, settings, queue, escalated, vague)
                        sizes.append(
                            await measure(f"{story}, {asks}", history, _turns(escalated, vague))
                        )
    return sizes


def _increments(sizes: list[Size]) -> str:
    ordered = sorted(sizes, key=lambda s: s.turns)
    steps = [
        f"{b.turns - 1}->{b.turns}: {b.plain - a.plain:+,d} B, {b.events - a.events:+d} events"
        for a, b in itertools.pairwise(ordered)
        if b.turns == a.turns + 1
    ]
    return "; ".join(steps)


# bench.throughput's story (the number in the opening, both answers, auto-approved): its turns.
SAME_STORY_TURNS = _turns(escalated=False, vague=None)


async def same_story(reference: Path, python: Path) -> list[Size]:
    """One conversation of bench.throughput's story on each demo, each on its own Worker."""
    # Imported here: bench.throughput reads payload_bytes from this module.
    from bench.throughput import REFERENCE, REFUND_BOT, both_sides, cell, check_reference

    check_reference(reference)
    sizes = []
    with tempfile.TemporaryDirectory() as tmp:
        async with both_sides(reference, python, Path(tmp)) as (bench, _):
            for side in (REFUND_BOT, REFERENCE):
                one = await cell(bench, side, 1, 1)
                size = Size(side, SAME_STORY_TURNS, one.events, one.history_bytes, 0)
                sizes.append(size)
                print(
                    f"  {side:<34} {size.events:4d} events  {size.stored:6,d} payload bytes "
                    f"stored, {one.history_size:,d} bytes in all",
                    flush=True,
                )
    return sizes


async def main(plot: Path, reference: Path | None, python: Path | None) -> None:
    print("Committed histories (tests/histories):")
    for path in sorted(HISTORIES.glob("*.json")):
        await measure(path.stem, WorkflowHistory.from_json(path.stem, path.read_text()))
    print(f"Against the number of turns (MAX_TURNS {MAX_TURNS}):")
    sizes = await growth()
    for story in ("auto-approved", "escalated"):
        mine = [s for s in sizes if s.name.startswith(story)]
        print(f"  {story}, each extra turn (decrypted bytes): {_increments(mine)}")
    fig, (by_bytes, by_events) = axes("Event History against turns", "decide turns", "", columns=2)
    by_bytes.set_ylabel("payload bytes (stored, encrypted)")
    by_events.set_ylabel("events")
    for story in ("auto-approved", "escalated"):
        mine = sorted((s for s in sizes if s.name.startswith(story)), key=lambda s: s.turns)
        turns = [s.turns for s in mine]
        by_bytes.plot(turns, [s.stored for s in mine], marker="o", label=f"refund-bot, {story}")
        by_events.plot(turns, [s.events for s in mine], marker="o", label=f"refund-bot, {story}")
    if reference is not None:
        print("bench.throughput's story, both answers sent at once, one conversation a side:")
        sides = await same_story(reference, python or reference / ".venv" / "bin" / "python")
        labels = ("refund-bot, bench.throughput's story", "reference, the same story")
        for side, marker, label in zip(sides, ("s", "X"), labels, strict=True):
            by_bytes.plot([side.turns], [side.stored], marker=marker, ls="", ms=9, label=label)
            by_events.plot([side.turns], [side.events], marker=marker, ls="", ms=9, label=label)
    for ax in (by_bytes, by_events):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    by_bytes.legend(loc="upper left")
    print(f"plot: {save(fig, plot)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", type=Path, default=default_path("history_size"))
    parser.add_argument("--reference", type=Path, help="a checkout of the reference demo")
    parser.add_argument(
        "--reference-python", type=Path, help="its virtualenv's python (PATH/.venv/bin/python)"
    )
    args = parser.parse_args()
    reference = args.reference and args.reference.resolve()
    run_benchmark(main(args.plot, reference, args.reference_python))

"""What writing ahead costs a customer message: the router's delivery against the Signal alone.

    this process: ConversationRouter, its inbox in a SQLite file (as `refund-bot run` keeps it)
      -> the dev server refund-bot embeds (no Worker: the conversations only take Signals)

Two variants, taking turns message by message on one server, into one running conversation a
round:
  written ahead  `router.keep` then `router.deliver`: the message inserted into the inbox and
                 committed (what the platform's "ok" waits for), the Signal (the router's
                 fallback to the reply's Update, and its only way on the background loop), the
                 entry removed
  signal alone   the same Signal, as the router sends it, with nothing kept: what delivering a
                 message cost when the inbox took only those that could not be delivered at once
Milliseconds from the call to its return, in this process; the first column is also the ack's
share (the keep alone), read from the router's own `keep` on the same messages.

    .venv/bin/python -m bench.router_cost [--rounds 100] [--messages 10]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.client import Client

from agent.models import Actor, CustomerMessage, ThreadRef
from agent.stores.sqlite import SqliteDatabase
from agent.workflow import RefundConversation
from bench import customer_says, no_hold, percentile, run_benchmark
from bench.server import embedded_server
from bot.conversations import ConversationRouter, InboundMessage, Kept, Routed
from bot.ids import workflow_id_for
from bot.inbox import Inbox
from harness.codec import TEST_CONVERTER

CUSTOMER = Actor(platform="slack", user_id="U0BENCH", display_name="bench")


def _message(thread: ThreadRef, text: str, *, opens: bool = False) -> InboundMessage:
    return customer_says(thread, CUSTOMER, text, opens=opens)


async def main(rounds: int, messages: int) -> None:
    timings: dict[str, list[float]] = {"keep": [], "written ahead": [], "signal alone": []}
    with tempfile.TemporaryDirectory() as tmp:
        async with embedded_server(Path(tmp) / "temporal") as server:
            client = await Client.connect(server.address, data_converter=TEST_CONVERTER)
            inbox = Inbox(SqliteDatabase(Path(tmp)))
            # Signals, as "signal alone" sends: with no Worker here an Update would wait out its
            # bound on every message (what an Update costs a turn is bench.turn_update's).
            router = ConversationRouter(
                client, f"bench-{uuid.uuid4().hex[:6]}", inbox, no_hold, message_updates=False
            )
            for r in range(rounds):
                thread = ThreadRef(platform="slack", workspace="T0", channel="C0", thread=f"{r}.0")
                opened = await router.on_message(_message(thread, "refund order 1234", opens=True))
                assert opened == Routed.STARTED, opened
                handle = client.get_workflow_handle(workflow_id_for(thread))
                for m in range(messages):
                    for variant in ("written ahead", "signal alone")[:: 1 if m % 2 else -1]:
                        message = _message(thread, f"message {m}")
                        began = time.perf_counter()
                        if variant == "signal alone":
                            await handle.signal(
                                RefundConversation.customer_message,
                                CustomerMessage(
                                    message_id=message.message_id,
                                    author=message.author,
                                    text=message.text,
                                ),
                            )
                        else:
                            kept = await router.keep(message)
                            assert isinstance(kept, Kept), kept
                            timings["keep"].append((time.perf_counter() - began) * 1000)
                            routed = await router.deliver(kept)
                            assert routed == Routed.SIGNALLED, routed
                        timings[variant].append((time.perf_counter() - began) * 1000)
                await handle.terminate("benchmark round over")
            assert await inbox.size() == 0  # every message kept was delivered, and removed
    print(f"{rounds} rounds x {messages} messages a variant, interleaved; milliseconds")
    print(f"{'':16} {'p50':>7} {'p95':>7} {'p99':>7}")
    for name, values in timings.items():
        print(
            f"{name:16} {statistics.median(values):7.2f} {percentile(values, 95):7.2f} "
            f"{percentile(values, 99):7.2f}"
        )
    ahead = statistics.median(timings["written ahead"])
    alone = statistics.median(timings["signal alone"])
    print(f"written ahead / signal alone at p50: {ahead / alone:.2f}x (+{ahead - alone:.2f} ms)")


def cli() -> None:
    parser = argparse.ArgumentParser(prog="bench.router_cost")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--messages", type=int, default=10)
    args = parser.parse_args()
    run_benchmark(main(args.rounds, args.messages))


if __name__ == "__main__":
    cli()

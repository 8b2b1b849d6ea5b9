"""What encryption costs per turn: the codec's own time, and a turn's latency with and without it.

    payloads of a recorded conversation -> AesGcmCodec encode + decode, timed   (the codec alone)
    conversations with / without the codec, interleaved on one server -> turn latency

1. The codec alone: every payload of the committed conversation `tests/histories/escalated.json`
   (decrypted first) encoded and decoded once, timed over many rounds; divided by its decide
   turns, it is the codec's cost per turn. Also the bytes it adds per payload.
2. A turn, end to end: three in-process Workers on one dev server, on task queues of their own:
   one whose client encrypts (the converter every process uses), one with the plain pydantic
   converter, and one with a codec that changes nothing (what the SDK's codec plumbing costs by
   itself: with any codec set, it walks every activation and completion for payloads).
   Conversations rotate between them (the order shifts every round), so all see the same
   machine. Each conversation's turns are read from Event History timestamps (the server's
   clock): *answer -> next question* from the customer's "Yes" Signal to the next question's
   post_to_thread completing (one decide step, one post), and *last answer -> held* from "Split
   seam" to the hold notice's post completing (decide steps, two lookups, authorize, a post).

    uv run python -m bench.codec_cost [--rounds-of-conversations 20] [--codec-rounds 300]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.testing import WorkflowEnvironment

from agent.codec import AesGcmCodec
from agent.decoded_history import decoded_history
from agent.history import step_names
from agent.settings import AgentSettings
from bench import run_benchmark
from bot.local.thread_store import LocalThreadStore
from tests.support.codec import TEST_CONVERTER, TEST_KEYS, all_payloads
from tests.support.conversation import LocalConversation
from tests.support.inproc import running_worker
from worker.server import temporal_cli_path

RECORDED = Path(__file__).parent.parent / "tests" / "histories" / "escalated.json"


class _Unchanged(PayloadCodec):
    """A codec that returns what it is given: the SDK's codec path, without any encryption."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


def _size(payload: Payload) -> int:
    return len(payload.data) + sum(len(k) + len(v) for k, v in payload.metadata.items())


def _recorded() -> WorkflowHistory:
    return WorkflowHistory.from_json(RECORDED.stem, RECORDED.read_text())


async def codec_alone(rounds: int) -> None:
    history = _recorded()
    plain = await decoded_history(history, TEST_CONVERTER)
    payloads = [p for event in plain.events for p in all_payloads(event)]
    turns = step_names(plain.events).count("decide_next_step")
    codec = AesGcmCodec(TEST_KEYS)
    encoded = await codec.encode(payloads)
    times: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        await codec.decode(await codec.encode(payloads))
        times.append(time.perf_counter() - started)
    per_conversation = statistics.median(times)
    added = sum(map(_size, encoded)) - sum(map(_size, payloads))
    largest = max(payloads, key=_size)
    big: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        await codec.decode(await codec.encode([largest]))
        big.append(time.perf_counter() - started)
    print(f"The codec alone, {RECORDED.name} ({len(payloads)} payloads, {turns} decide turns):")
    print(f"  encode + decode, whole conversation  median {per_conversation * 1e6:7.1f} us")
    print(f"  per decide turn                      median {per_conversation / turns * 1e6:7.1f} us")
    largest_label = f"largest payload ({_size(largest):,d} bytes)"
    print(f"  {largest_label:<36} median {statistics.median(big) * 1e6:7.1f} us")
    print(
        f"  bytes added: {added:,d} over {len(payloads)} payloads "
        f"({added / len(payloads):.0f} per payload; {sum(map(_size, payloads)):,d} -> "
        f"{sum(map(_size, encoded)):,d})",
        flush=True,
    )


def _turns(history: WorkflowHistory) -> tuple[float, float]:
    """(answer -> next question, last answer -> held) in seconds, from event timestamps."""
    signals: list[float] = []
    posts: list[float] = []
    scheduled: dict[int, str] = {}
    for event in history.events:
        at = event.event_time.ToDatetime().timestamp()
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signals.append(at)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            if scheduled[attrs.scheduled_event_id] == "post_to_thread":
                posts.append(at)
    # Signals: opening, "Yes", "Split seam". Posts: question 1, question 2, the hold notice.
    _, yes, seam = signals
    return (
        next(p for p in posts if p > yes) - yes,
        next(p for p in posts if p > seam) - seam,
    )


async def _one(client: Client, threads: LocalThreadStore, queue: str) -> tuple[float, float]:
    conv = LocalConversation(client, threads, queue)
    handle = await conv.open("please refund order 1234", hold=True)
    for answer in ("Yes", "Split seam"):
        await conv.next_bot_message()
        await conv.reply(answer)
    await conv.next_bot_message()  # the hold notice: the refund waits for a release
    await conv.wait_phase("held_before_refund")  # its workflow task done: nothing in flight
    turns = _turns(await handle.fetch_history())
    await handle.terminate("benchmark done")
    return turns


def _row(name: str, values: Sequence[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
    return (
        f"    {name:<11} median {statistics.median(ms):7.1f} ms   p90 {p90:7.1f} ms  (n={len(ms)})"
    )


async def turn_latency(rounds: int) -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli_path()), data_converter=TEST_CONVERTER
    )
    target = env.client.service_client.config.target_host
    converters: dict[str, DataConverter] = {
        "encrypted": TEST_CONVERTER,
        "plain": pydantic_data_converter,
        "no-op codec": dataclasses.replace(pydantic_data_converter, payload_codec=_Unchanged()),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in converters}
    with tempfile.TemporaryDirectory() as tmp:
        settings = AgentSettings(_env_file=None, data_dir=Path(tmp))  # type: ignore[call-arg]
        threads = LocalThreadStore(Path(tmp) / "threads.sqlite")
        async with env:
            clients = {
                name: await Client.connect(target, namespace=env.client.namespace, data_converter=c)
                for name, c in converters.items()
            }
            async with contextlib.AsyncExitStack() as workers:
                queues = {
                    name: await workers.enter_async_context(
                        running_worker(clients[name], settings, threads)
                    )
                    for name in converters
                }
                for name in converters:  # one warm-up each: imports, first connections
                    await _one(clients[name], threads, queues[name])
                names = list(converters)
                for i in range(rounds):
                    for name in names[i % len(names) :] + names[: i % len(names)]:
                        results[name].append(await _one(clients[name], threads, queues[name]))
    print(f"A turn, end to end ({rounds} conversations each, interleaved on one dev server):")
    for i, turn in enumerate(("answer -> next question", "last answer -> held")):
        print(f"  {turn}:")
        for name in converters:
            print(_row(name, [r[i] for r in results[name]]))
    for i, turn in enumerate(("answer -> next question", "last answer -> held")):
        median = {name: statistics.median(r[i] for r in results[name]) for name in converters}
        print(
            f"  {turn}: encrypted - plain = "
            f"{(median['encrypted'] - median['plain']) * 1000:+.1f} ms, no-op codec - plain = "
            f"{(median['no-op codec'] - median['plain']) * 1000:+.1f} ms (medians)"
        )


async def main(conversation_rounds: int, codec_rounds: int) -> None:
    await codec_alone(codec_rounds)
    await turn_latency(conversation_rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds-of-conversations", type=int, default=20)
    parser.add_argument("--codec-rounds", type=int, default=300)
    args = parser.parse_args()
    run_benchmark(main(args.rounds_of_conversations, args.codec_rounds))

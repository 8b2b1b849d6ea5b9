"""What encryption costs: the codec's own time and bytes, per payload and per turn.

    payloads of a recorded conversation -> AesGcmCodec encode + decode, timed   (the codec alone)

Every payload of the committed conversation `tests/histories/escalated.json` (decrypted first)
encoded and decoded once, timed over many rounds; divided by its decide turns, it is the codec's
cost per turn. Also the bytes it adds per payload. What a turn costs end to end with the codec on,
off, and with a codec that changes nothing, interleaved on one server, is bench.turn_latency's
(which prints these figures first).

    .venv/bin/python -m bench.codec_cost [--codec-rounds 300]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowHistory

from agent.codec import AesGcmCodec
from agent.decoded_history import decoded_history
from bench import run_benchmark
from harness.codec import TEST_CONVERTER, TEST_KEYS, all_payloads
from harness.events import step_names

RECORDED = Path(__file__).parent.parent / "tests" / "histories" / "escalated.json"


def _size(payload: Payload) -> int:
    return len(payload.data) + sum(len(k) + len(v) for k, v in payload.metadata.items())


def _recorded() -> WorkflowHistory:
    return WorkflowHistory.from_json(RECORDED.stem, RECORDED.read_text())


async def codec_alone(rounds: int) -> None:
    history = _recorded()
    plain = await decoded_history(history, TEST_CONVERTER)
    payloads = [p for event in plain.events for p in all_payloads(event)]
    turns = step_names(list(plain.events)).count("decide_next_step")
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--codec-rounds", type=int, default=300)
    run_benchmark(codec_alone(parser.parse_args().codec_rounds))

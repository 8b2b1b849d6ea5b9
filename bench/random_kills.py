"""The crash drill at full size: 200 conversations while the Worker is SIGKILLed again and again.

    place_crowd -> 200 stories (4 kinds) | SIGKILL each Worker 0.3-2 s after it polls -> audit

The same drill as tests/test_crash_drill.py (harness/kill_drill.py), ten times bigger and
with no cap on the kills. It prints the figures docs/benchmarks.md quotes: conversations, kills,
refunds, and what the audit of the owners' records found (wrong outcomes, refunds per conversation
other than expected, posts repeated in a thread, customer messages missing from history: all 0).

    uv run python -m bench.random_kills [--conversations 200] [--seed 10] [--workers 1]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench import run_benchmark
from harness.dev_server import start_dev_server
from harness.kill_drill import run_drill


async def main(conversations: int, seed: int, workers: int) -> None:
    env = await start_dev_server()
    async with env:
        with tempfile.TemporaryDirectory() as tmp:
            report = await run_drill(env, Path(tmp), conversations, seed=seed, workers=workers)
    print(
        f"{report.conversations} conversations in {report.seconds:.0f} s, {report.kills} kills "
        f"({report.crash_worker_requests} through /crash-worker), {report.refunds} refunds",
        flush=True,
    )
    print(
        f"wrong outcomes {len(report.wrong_outcomes)}, refunds other than expected "
        f"{len(report.refund_mismatches)}, duplicated posts {report.duplicates}, customer "
        f"messages missing from history {len(report.missing_messages)}",
        flush=True,
    )
    for problem in (
        report.wrong_outcomes
        + report.refund_mismatches
        + report.repeated_posts
        + report.missing_messages
    ):
        print(f"  {problem}", flush=True)
    if not report.clean:
        raise SystemExit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1, help="Worker processes polling at once")
    args = parser.parse_args()
    run_benchmark(main(args.conversations, args.seed, args.workers))

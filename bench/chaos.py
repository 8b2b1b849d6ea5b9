"""The chaos drill: conversations of every kind while random faults hit every component.

    deployment (real processes) -> the seeded schedule, printed -> faults at their times
        | customers and approvers in Slack threads -> the owners audited -> the figures

On SQLite: `refund-bot run` (the bot, the Worker supervisor, the Worker and its warm standby). On
PostgreSQL: two `refund-bot bot` and one `refund-bot worker --supervised`, one database. Both on a
Temporal dev server the drill owns (its database file survives each SIGKILL), behind the Slack
fake: customers' events reach the bots over HTTP, signed, retried as Slack retries until a bot
acknowledges them. Faults: SIGKILL of the Worker, the standby, a bot, Temporal (started again on
its database); PostgreSQL restarted; SIGSTOP of each; and three dependency outages of
--outage-seconds each (the Slack API answering 500, the Slack API not answering, the database
stopped; on SQLite its store files write-locked). Then, from the owners: every acknowledged
message answered exactly once, every conversation ended with its sentence, no refund twice, none
without a live grant, no question asked twice, the inbox empty, no process left behind. One line
per violation; exit status 1 if there is any. docs/benchmarks.md, "Chaos drill", quotes it.

    uv run python -m bench.chaos [--backend sqlite|postgresql] [--conversations 60]
        [--seconds 600] [--seed 1] [--outage-seconds 120] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from bench import run_benchmark
from harness.chaos.drill import ChaosConfig, run_chaos


def _say(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


async def main(config: ChaosConfig) -> None:
    report = await run_chaos(config, say=_say)
    for line in report.lines():
        print(line, flush=True)
    if not report.clean:
        raise SystemExit(1)


def config_from(args: argparse.Namespace) -> ChaosConfig:
    base = ChaosConfig.quick(args.backend) if args.quick else ChaosConfig(backend=args.backend)
    given = {
        name: value
        for name, value in (
            ("conversations", args.conversations),
            ("seconds", args.seconds),
            ("outage_seconds", args.outage_seconds),
            ("quick_retry", args.quick_retry),
        )
        if value is not None
    }
    return dataclasses.replace(base, seed=args.seed, **given)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--conversations", type=int, help="default 60 (--quick: 15)")
    parser.add_argument("--seconds", type=float, help="the fault phase, default 600 (--quick: 150)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--outage-seconds",
        type=float,
        help="each dependency outage, default 120 (--quick: 30)",
    )
    parser.add_argument(
        "--quick-retry",
        type=float,
        help="REFUND_QUICK_RETRY in seconds, default 30, the product's (--quick: 5)",
    )
    parser.add_argument("--quick", action="store_true", help="a few conversations and faults")
    run_benchmark(main(config_from(parser.parse_args())))

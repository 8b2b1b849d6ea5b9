"""How long `refund-bot run` takes to stop: graceful on a signal, and its children after a SIGKILL.

Each run is the real `refund-bot run` (no chat platform, stdin /dev/null, embedded Temporal in a
fresh data directory on free ports), started and left to print its status line, then:
  SIGTERM / SIGINT / SIGHUP   signal to exit (the whole stop: platforms, Worker, then Temporal)
  SIGKILL                     signal to the last of its children gone (Worker and server, on
                              their own: the parent-death signal, the lifeline)

    .venv/bin/python -m bench.stop_time [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import tempfile
import time
from pathlib import Path

from harness.cli_process import RefundBotProcess, fresh_env
from harness.conditions import wait_for
from worker.exit import exit_now
from worker.lifecycle import alive

STATUS = r"status: Temporal \S+ \(embedded, pid \d+\) \| Worker pid \d+ polling"
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL)


async def one_stop(sig: signal.Signals) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        bot = await RefundBotProcess.start(["run"], fresh_env(Path(tmp) / "data"), Path(tmp))
        try:
            await bot.expect(STATUS, timeout=180)
            children = bot.tree()
            started = time.monotonic()
            bot.send(sig)
            if sig == signal.SIGKILL:
                await wait_for(
                    lambda: not any(alive(pid) for pid in children),
                    timeout=30,
                    interval=0.01,
                    what="the children to exit",
                )
            else:
                code = await bot.exit_code(timeout=30)
                assert code == 0, bot.output
            return time.monotonic() - started
        finally:
            await bot.close()


async def main(runs: int) -> None:
    print(f"{'signal':8} {'runs':>4} {'median':>8} {'min':>7} {'max':>7}")
    for sig in SIGNALS:
        times = [await one_stop(sig) for _ in range(runs)]
        print(
            f"{sig.name:8} {runs:>4} {statistics.median(times):>7.2f}s"
            f" {min(times):>6.2f}s {max(times):>6.2f}s",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    asyncio.run(main(parser.parse_args().runs))
    exit_now(0)

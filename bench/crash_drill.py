"""The crash drill, measured: how fast a conversation resumes after its Worker is SIGKILLed.

For each drill: a conversation is held one step before its refund; /crash-worker's path (the
control task queue) SIGKILLs the Worker process and starts a new one; the hold is released as soon
as the new Worker polls. Measured:
  ready   seconds from the restart request to the new Worker polling (RestartReport)
  resume  seconds from the release Signal to the issue_refund Activity being scheduled, read from
          Event History timestamps (both written by the server, one clock)
  total   seconds from sending release to the Workflow's result, on this process's clock
with the supervisor's sticky-queue reset on (the default) and off (the Worker's 2 s sticky
schedule-to-start timeout is then the only way back; the SDK default would be 10 s).

    uv run python -m bench.crash_drill [--drills 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from bench import release_and_refund, run_benchmark
from harness.codec import TEST_CODEC_ENV
from harness.conversation import LocalConversation
from harness.dev_server import start_dev_server
from harness.stack import settings_for
from refund_bot.wiring import local_thread_store
from worker.control import request_worker_restart
from worker.runner import prepare_stores
from worker.supervisor import WorkerSupervisor


async def _resume_seconds(conv: LocalConversation) -> float:
    assert conv.handle is not None
    released, scheduled = await release_and_refund(conv.handle)
    assert released and scheduled
    return (scheduled - released).total_seconds()


async def drill(env: WorkflowEnvironment, reset_sticky: bool) -> tuple[float, float, float]:
    """One drill on a fresh data directory (the ledger refunds order 1234 once per payment)."""
    with tempfile.TemporaryDirectory() as tmp:
        temporal, settings = settings_for(env, Path(tmp))
        queue = temporal.task_queue
        await prepare_stores(settings)
        supervisor = WorkerSupervisor(
            temporal,
            client=env.client,
            env={
                "DATA_DIR": tmp,
                "SLACK_BOT_TOKEN": "",
                "DISCORD_TOKEN": "",
                "STRIPE_API_KEY": "",
                **TEST_CODEC_ENV,
            },
            log_path=Path(tmp) / "worker.log",
            reset_sticky=reset_sticky,
        )
        await supervisor.start()
        try:
            conv = LocalConversation(env.client, local_thread_store(settings), queue)
            handle = await conv.open("please refund order 1234", hold=True)
            for answer in ("Yes", "Split seam"):
                await conv.next_bot_message()
                await conv.reply(answer)
            await conv.wait_phase("held_before_refund")
            report = await request_worker_restart(env.client, temporal.control_task_queue)
            started = time.monotonic()
            await handle.signal("release")
            outcome = await handle.result()
            total = time.monotonic() - started
            assert outcome.status == "refunded", outcome
            return report.seconds_to_ready, await _resume_seconds(conv), total
        finally:
            await supervisor.stop()


def _row(name: str, values: list[float]) -> str:
    return (
        f"  {name:<7} median {statistics.median(values):6.2f} s   "
        f"min {min(values):6.2f}   max {max(values):6.2f}   (n={len(values)})"
    )


async def main(count: int) -> None:
    env = await start_dev_server()
    async with env:
        for reset in (True, False):
            runs = [await drill(env, reset) for _ in range(count)]
            print(f"sticky-queue reset {'on (default)' if reset else 'off'}:", flush=True)
            for i, name in enumerate(("ready", "resume", "total")):
                print(_row(name, [run[i] for run in runs]), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drills", type=int, default=5)
    run_benchmark(main(parser.parse_args().drills))

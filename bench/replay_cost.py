"""What replaying one conversation costs a Worker, by workflow runner: what a Worker taking over a
crowd pays per conversation it did not hold.

    committed history (tests/histories/auto_approved.json)
      -> Replayer(runner) x N, the runners interleaved one replay each in turn
      -> wall and CPU milliseconds per replay

Runners: the SDK's sandbox, which the Worker runs (`sandbox`), and no sandbox (`unsandboxed`, for
scale: what the sandbox costs at all). Each with the converter the Worker uses
(agent.temporal_client: its pydantic converter made once per process), and the sandbox once more
with the SDK's pydantic converter (`sandbox, SDK converter`: one made for every instance and two
for every activation, each with its own TypeAdapters). One Replayer per runner, reused, in one
process: no server is involved, so the figure is the Worker's own share of a takeover (its
interpreter and the SDK's core).

    .venv/bin/python -m bench.replay_cost [--replays 200] [--history tests/histories/...json]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import DataConverter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from agent.workflow import RefundConversation
from bench import percentile, run_benchmark
from harness.codec import TEST_CONVERTER

HISTORY = Path(__file__).parent.parent / "tests" / "histories" / "auto_approved.json"
# The Worker's converter with the SDK's pydantic payload converter in place of its own.
SDK_CONVERTER = dataclasses.replace(
    TEST_CONVERTER, payload_converter_class=PydanticPayloadConverter
)
RUNNERS: dict[str, tuple[WorkflowRunner, DataConverter]] = {
    "sandbox": (SandboxedWorkflowRunner(), TEST_CONVERTER),
    "sandbox, SDK converter": (SandboxedWorkflowRunner(), SDK_CONVERTER),
    "unsandboxed": (UnsandboxedWorkflowRunner(), TEST_CONVERTER),
}


async def main(replays: int, history: WorkflowHistory) -> None:
    replayers = {
        name: Replayer(
            workflows=[RefundConversation], data_converter=converter, workflow_runner=runner
        )
        for name, (runner, converter) in RUNNERS.items()
    }
    wall: dict[str, list[float]] = {name: [] for name in RUNNERS}
    cpu: dict[str, list[float]] = {name: [] for name in RUNNERS}
    for replayer in replayers.values():  # warm: imports, the sandbox's first module loads
        await replayer.replay_workflow(history)
    for _ in range(replays):
        for name, replayer in replayers.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            wall[name].append((time.perf_counter() - started) * 1000)
            cpu[name].append((time.process_time() - started_cpu) * 1000)
            assert result.replay_failure is None, result.replay_failure
    events = len(history.events)
    print(f"{replays} replays per runner of {history.workflow_id} ({events} events), interleaved:")
    base = statistics.median(wall["sandbox"])
    for name in RUNNERS:
        p50 = statistics.median(wall[name])
        print(
            f"  {name:<24} wall p50 {p50:6.1f} ms  p90 {percentile(wall[name], 90):6.1f} ms  "
            f"CPU p50 {statistics.median(cpu[name]):6.1f} ms  ({p50 / base:.2f}x the sandbox's)",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--history", type=Path, default=HISTORY)
    args = parser.parse_args()
    recorded = WorkflowHistory.from_json(args.history.stem, args.history.read_text())
    run_benchmark(main(args.replays, recorded))

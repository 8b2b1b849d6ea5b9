"""What a new conversation's sandbox costs the Worker before any of its history runs.

    first workflow task of a run the Worker does not hold (a new conversation, or one to replay)
      -> CompiledOnceSandboxRunner.create_instance -> agent/workflow.py run afresh in the sandbox
         (its imports checked, its constants built, @workflow.defn checking the class) -> instance

Every conversation pays this once per Worker that runs it: a thousand conversations started
together pay it a thousand times, and a Worker taking over a crowd pays it for each. Timed here
in one process with no server, the module's bytecode cached on disk as `refund-bot worker` keeps
it (worker.bytecode), one instance after another; the first is not counted.

    .venv/bin/python -m bench.sandbox_instance [--instances 500]
"""

from __future__ import annotations

import argparse
import statistics
import time

import temporalio.workflow

from agent.workflow import RefundConversation
from bench import percentile, run_benchmark
from worker.bytecode import keep_bytecode
from worker.sandbox import CompiledOnceSandboxRunner


async def main(instances: int) -> None:
    keep_bytecode(RefundConversation)
    defn = temporalio.workflow._Definition.must_from_class(RefundConversation)
    runner = CompiledOnceSandboxRunner()
    # The SDK's own check at Worker start: it creates (and drops) one instance, as each run does.
    runner.prepare_workflow(defn)
    wall, cpu = [], []
    for _ in range(instances):
        started, started_cpu = time.perf_counter(), time.process_time()
        runner.prepare_workflow(defn)
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    print(f"a conversation's sandbox, {instances} instances (milliseconds):")
    print(
        f"  wall p10 {percentile(wall, 10):.2f}  p50 {statistics.median(wall):.2f}  "
        f"p90 {percentile(wall, 90):.2f}   CPU p50 {statistics.median(cpu):.2f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=500)
    run_benchmark(main(parser.parse_args().instances))

"""What a new conversation's sandbox costs the Worker before any of its history runs.

    first workflow task of a run the Worker does not hold (a new conversation, or one to replay)
      -> CompiledOnceSandboxRunner.create_instance -> agent/workflow.py run afresh in the sandbox
         (its imports checked, its constants built, @workflow.defn checking the class) -> instance

Every conversation pays this once per Worker that runs it: a thousand conversations started
together pay it a thousand times, and a Worker taking over a crowd pays it for each. Timed here
in one process with no server, the module's bytecode cached on disk as `refund-bot worker` keeps
it (worker.bytecode), one instance after another; the first is not counted. It also times the
SDK's check of the class inside each (`@workflow.defn`: temporalio's _Definition._apply_to_class,
which tests each of the class's members against a runtime-checkable Protocol).

    .venv/bin/python -m bench.sandbox_instance [--instances 500]
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import statistics
import time
from collections.abc import Iterator
from typing import Any

import temporalio.workflow
from temporalio.workflow import _definition

from agent.workflow import RefundConversation
from bench import percentile, run_benchmark
from worker.bytecode import keep_bytecode
from worker.sandbox import CompiledOnceSandboxRunner


@contextlib.contextmanager
def timing_class_checks() -> Iterator[list[float]]:
    """While inside, each @workflow.defn check of a class (the SDK's), in milliseconds."""
    check = _definition._Definition._apply_to_class
    took: list[float] = []

    def timed(*args: Any, **kwargs: Any) -> None:
        started = time.perf_counter()
        check(*args, **kwargs)
        took.append((time.perf_counter() - started) * 1000)

    _definition._Definition._apply_to_class = staticmethod(timed)  # type: ignore[method-assign]
    try:
        yield took
    finally:
        _definition._Definition._apply_to_class = staticmethod(check)  # type: ignore[method-assign]


async def main(instances: int) -> None:
    keep_bytecode(RefundConversation)
    defn = temporalio.workflow._Definition.must_from_class(RefundConversation)
    runner = CompiledOnceSandboxRunner()
    # The SDK's own check at Worker start: it creates (and drops) one instance, as each run does.
    runner.prepare_workflow(defn)
    wall, cpu = [], []
    with timing_class_checks() as checks:
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
    members = len(inspect.getmembers(RefundConversation))
    print(
        f"  of which @workflow.defn's check of the class (the SDK's; {members} members): "
        f"p50 {statistics.median(checks):.2f}",
        flush=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=500)
    run_benchmark(main(parser.parse_args().instances))

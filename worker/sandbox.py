"""The workflow sandbox the Worker runs conversations in: the SDK's, with its code strings compiled
once instead of on every call.

    activation | payload -> _Instance._run_code(code) -> exec(compiled once per string) -> workflow

The SDK (temporalio 1.35) enters a conversation's sandbox by exec-ing a small code string: once
per activation, and once per payload it encodes or decodes (to learn the payload's serialization
context), so a conversation replayed from the start of its history runs about 120 of them. `exec`
of a string compiles it first, every time: 15% of a Worker's interpreter when it takes over a
crowd of conversations and replays each (docs/benchmarks.md, "Issue 10, third pass"). The strings
are a handful of constants per Workflow class, so each is compiled once and the code object kept.
Nothing else changes: the same restrictions, the same importer, the same code run.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import CodeType
from typing import Any

from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox._runner import _Instance


@functools.lru_cache(maxsize=64)
def compiled(code: str) -> CodeType:
    """`code` compiled as exec would compile it; bounded, though the SDK's strings are a few."""
    return compile(code, "<string>", "exec")


class _CompiledOnceInstance(_Instance):
    """One conversation's sandbox; the SDK's `_Instance` with `_run_code` given compiled code."""

    def _run_code(self, code: str, **extra_globals: Any) -> None:
        # exec takes a code object as it takes a string: the SDK's method runs it unchanged.
        super()._run_code(compiled(code), **extra_globals)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CompiledOnceSandboxRunner(SandboxedWorkflowRunner):
    """The SDK's sandboxed runner (same restrictions), whose instances compile each code string
    once. Given to the Worker and to every Replayer, so replay tests run what production runs."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _CompiledOnceInstance(det, self.runner_class, self.restrictions)

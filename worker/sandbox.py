"""The workflow sandbox the Worker runs conversations in: the SDK's, minus two costs it pays on
every payload.

    activation -> _Instance._run_code(code) -> exec(compiled once per string) -> workflow code
    payload    -> serialization context, read from the instance's pending commands directly

The SDK (temporalio 1.35) enters a conversation's sandbox by exec-ing a small code string: once
per activation, and once per payload it encodes or decodes, to ask the instance for the payload's
serialization context; a conversation replayed from the start of its history does that about 120
times. Each entry compiles its string again and swaps the sandbox's importer in and out. Here the
strings (a handful per Workflow class) are compiled once, and the context, which is the SDK's own
bookkeeping of the instance's pending commands (no workflow code runs, nothing is imported), is
read without entering the sandbox. Workflow code still runs only inside it, under the same
restrictions (tests/test_sandbox.py). What it saves: docs/benchmarks.md, "Replay cost".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import CodeType
from typing import Any

from temporalio.converter import SerializationContext, StorageDriverStoreContext
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox._in_sandbox import InSandbox
from temporalio.worker.workflow_sandbox._runner import _Instance


@functools.lru_cache(maxsize=64)
def compiled(code: str) -> CodeType:
    """`code` compiled as exec would compile it; bounded, though the SDK's strings are a few."""
    return compile(code, "<string>", "exec")


class _CompiledOnceInstance(_Instance):
    """One conversation's sandbox: the SDK's `_Instance`, its code strings compiled once and the
    payloads' contexts read without entering it."""

    def _run_code(self, code: str, **extra_globals: Any) -> None:
        # exec takes a code object as it takes a string: the SDK's method runs it unchanged.
        super()._run_code(compiled(code), **extra_globals)  # type: ignore[arg-type]

    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        return self._in_sandbox().get_serialization_context(command_info)

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        return self._in_sandbox().get_external_store_context(command_info)

    def _in_sandbox(self) -> InSandbox:
        # The object the SDK's own code strings call into (_Instance._create_instance made it).
        return self.globals_and_locals["__temporal_in_sandbox"]  # type: ignore[return-value]


@dataclass(frozen=True)
class CompiledOnceSandboxRunner(SandboxedWorkflowRunner):
    """The SDK's sandboxed runner (same restrictions), whose instances compile each code string
    once. Given to the Worker and to every Replayer, so replay tests run what production runs."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _CompiledOnceInstance(det, self.runner_class, self.restrictions)

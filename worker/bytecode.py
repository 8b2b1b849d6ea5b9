"""A Worker keeps its Workflow's bytecode, even where PYTHONDONTWRITEBYTECODE is set.

    build_worker -> keep_bytecode(RefundConversation) -> agent/__pycache__/workflow.*.pyc

The workflow sandbox imports the Workflow's module afresh for every conversation it starts or
replays: that is how it keeps one run's module state from another's. Python reads that module
from its `.pyc` when one is there; without one (PYTHONDONTWRITEBYTECODE, common in container
images) every conversation compiles `agent/workflow.py` again, about 9 ms of the Worker's CPU here,
and a Worker taking over 200 conversations after a crash compiles it 200 times (docs/benchmarks.md,
"The held crowd"). Writing that one file once, at start, is cheaper than any of it.
"""

from __future__ import annotations

import compileall
import inspect
import logging

log = logging.getLogger(__name__)


def keep_bytecode(*workflows: type) -> None:
    """Write (or leave, when it is current) the `.pyc` of each Workflow class's module."""
    for workflow in workflows:
        source = inspect.getsourcefile(workflow)
        if source is None:
            continue
        # compile_file leaves a current .pyc alone and writes one even under
        # PYTHONDONTWRITEBYTECODE (py_compile does not consult it).
        if not compileall.compile_file(source, quiet=2):
            # A read-only install: the Worker still runs, each conversation compiling its module.
            log.warning(
                "cannot write the bytecode of %s: each conversation the sandbox starts or replays "
                "compiles it again (precompile it in the image: python -m compileall)",
                source,
            )

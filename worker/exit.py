"""Ending a process that used the Temporal SDK, with its own exit status.

The SDK's native (Rust) threads can outlive interpreter finalization and abort the process
(temporalio/sdk-python#300), turning a clean exit into SIGABRT. Once everything has shut down in
order, a process that has used the SDK ends here instead of finalizing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

from agent import tracing


def exit_now(code: int) -> NoReturn:
    tracing.flush()  # spans still batched in memory (none to flush when tracing is off)
    # After a SIGHUP the terminal may be gone: what could not be written is lost, the code is not.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    logging.shutdown()
    os._exit(code)

"""Helpers for tests that run real processes (to wait on state: tests.support.conditions)."""

from __future__ import annotations

import os
import socket


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists (signal 0 checks without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

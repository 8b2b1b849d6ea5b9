"""Helpers for tests that run real processes (to wait on state: tests.support.conditions; to run a
`refund-bot` command: tests.support.cli_process; whether a pid runs: worker.lifecycle.alive)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

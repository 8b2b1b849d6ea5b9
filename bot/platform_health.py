"""Each chat platform's health, as its adapter last saw it: connected, retrying, or down and why.

    platform adapter (serve) -> PlatformHealth -> the status line, /healthz (refund_bot/ops.py)

An adapter never raises into the stack: it records what happened here and keeps trying (or, for a
credential the platform refuses, stays down with one clear line). Everything that reports health
reads these objects; nothing else decides whether a platform is up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

# standby: another process holds this platform's one connection (Discord's gateway lease).
State = Literal["starting", "connected", "standby", "retrying", "down", "stopped"]


@dataclass
class PlatformHealth:
    name: str  # "slack", "discord", "local"
    state: State = "starting"
    since: float = field(default_factory=time.time)  # wall clock of the last change of state
    detail: str = ""  # the last failure, one line, never a secret
    failures: int = 0  # consecutive failures since the last successful connection

    def _set(self, state: State, detail: str = "") -> None:
        if state != self.state:
            self.since = time.time()
        self.state, self.detail = state, detail

    def connected(self) -> None:
        self.failures = 0
        self._set("connected")

    def retrying(self, why: str) -> None:
        self.failures += 1
        self._set("retrying", why)

    def down(self, why: str) -> None:
        """A failure retrying cannot mend (a refused credential): stays down until restarted."""
        self.failures += 1
        self._set("down", why)

    def standby(self, why: str) -> None:
        """Not connected on purpose: another process serves this platform (`why` says which)."""
        self.failures = 0
        self._set("standby", why)

    def stopped(self) -> None:
        self._set("stopped")

    @property
    def ok(self) -> bool:
        return self.state == "connected"

    @property
    def ready(self) -> bool:
        """Doing its part: connected, or standing by while another process is."""
        return self.state in ("connected", "standby")

    def summary(self, now: float | None = None) -> str:
        """`slack connected`, `discord retrying for 42s (gateway refused: …)`, `discord standby
        (gateway held by pid 4242 on host-a)`, …"""
        if self.state in ("connected", "starting", "stopped"):
            return f"{self.name} {self.state}"
        if self.state == "standby":
            return f"{self.name} standby ({self.detail})"
        seconds = int((now if now is not None else time.time()) - self.since)
        return f"{self.name} {self.state} for {seconds}s ({self.detail})"

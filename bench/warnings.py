"""The warnings a benchmark's Worker logged: each run counts them, so none goes unexplained.

a Worker's log -> the WARNING / ERROR lines -> counted by what they say (ids and numbers
stripped) -> "heartbeat failed ... UnknownActivity: 3, ..." in the run's figures
               -> its full garbage collections (worker.gc_pauses' lines) -> how many, how long
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

_LEVEL = re.compile(r"\b(WARNING|WARN|ERROR)\b")
# The SDK's core colours its lines for a terminal; its Workers' log keeps the escapes.
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
# What varies from one occurrence to the next: ids, numbers, quoted values, the record's context.
_VARYING = re.compile(r"\(\{.*$|'[^']*'|\"[^\"]*\"|[0-9a-f]{8}-[0-9a-f-]{27}|\d+(\.\d+)?")


def logged_warnings(log: Path, *, top: int = 5) -> str:
    """The log's warnings and errors, each kind counted, the most frequent first: "none" if none."""
    return warnings_in(_read(log), top=top)


def warnings_in(text: str, *, top: int = 5) -> str:
    """`logged_warnings` of a log's text."""
    kinds: collections.Counter[str] = collections.Counter()
    for line in _COLOUR.sub("", text).splitlines():
        if match := _LEVEL.search(line):
            said = _VARYING.sub("…", line[match.start() :]).strip()
            kinds[said[:120]] += 1
    if not kinds:
        return "none"
    shown = [f"{n} x {kind}" for kind, n in kinds.most_common(top)]
    rest = sum(kinds.values()) - sum(n for _, n in kinds.most_common(top))
    return "; ".join(shown + ([f"{rest} others"] if rest else []))


# worker.gc_pauses' line for a full collection of 0.1 s or more.
_PAUSE = re.compile(r"a full garbage collection held this Worker (\d+\.\d+) s")


def pauses_in(text: str) -> list[float]:
    """The seconds of each full garbage collection a Worker said in `text` (0.1 s or more)."""
    return [float(p) for p in _PAUSE.findall(text)]


def pauses_said(pauses: list[float]) -> str:
    """Full collections (those a Worker said: 0.1 s or more): how many, how long, the seconds
    they held it in all, and how many reached the SDK's 2 s deadlock timeout."""
    if not pauses:
        return "none of 0.1 s or more"
    return (
        f"{len(pauses)} of 0.1 s or more, {min(pauses):.2f}-{max(pauses):.2f} s, "
        f"{sum(pauses):.1f} s in all; {sum(p >= 2 for p in pauses)} of 2 s or more"
    )


def print_worker_log(log: Path) -> None:
    """A run's two lines from its Workers' log, read once: the warnings and the full collections."""
    text = _read(log)
    print(f"  the Workers' warnings: {warnings_in(text)}", flush=True)
    print(f"  the Workers' full garbage collections: {pauses_said(pauses_in(text))}", flush=True)


def _read(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""

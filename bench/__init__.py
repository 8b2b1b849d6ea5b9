"""Benchmarks: each module's docstring gives its command; results go in docs/benchmarks.md."""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import Coroutine, Sequence
from typing import Any, NoReturn

from agent.codec import CodecKeyError
from worker.exit import exit_now


def run_benchmark(main: Coroutine[Any, Any, None]) -> NoReturn:
    """Run `main` to the end; a codec key problem stops it in one line naming the key id."""
    try:
        asyncio.run(main)
    except CodecKeyError as err:
        print(f"benchmark stopped: {err}", file=sys.stderr)
        exit_now(1)
    exit_now(0)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least q% of the values at or below."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]

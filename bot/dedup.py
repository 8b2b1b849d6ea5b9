"""Drop redelivered platform events (Slack retries, gateway reconnect replays) by event id."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

# Slack retries for up to about an hour in the worst case, but three times within minutes in
# practice; Discord replays on resume within seconds. Ten minutes or more is the contract.
DEFAULT_TTL_SECONDS = 15 * 60
MAX_ENTRIES = 50_000


class RecentEvents:
    """Event ids accepted within the TTL. Bounded in time and in size."""

    def __init__(
        self, ttl_seconds: float = DEFAULT_TTL_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl_seconds
        self._clock = clock
        self._seen: OrderedDict[str, float] = OrderedDict()

    def _expire(self, now: float) -> None:
        while self._seen:
            oldest, at = next(iter(self._seen.items()))
            if now - at < self._ttl and len(self._seen) <= MAX_ENTRIES:
                break
            del self._seen[oldest]

    def seen(self, event_id: str) -> bool:
        now = self._clock()
        self._expire(now)
        return event_id in self._seen

    def accept(self, event_id: str) -> None:
        """Call once the event has been accepted (signalled or queued), not before: a first
        delivery that failed before acceptance must be processed when the platform retries it."""
        self._seen[event_id] = self._clock()
        self._seen.move_to_end(event_id)

"""Slack's side of the wire: each customer event POSTed, signed, to a bot, retried until one acks.

    deliver(delivery) -> a bot chosen as a load balancer would -> HTTP 200 within 3 s: acknowledged
        (Slack never sends it again) | refused, reset or slow -> sent again, X-Slack-Retry-Num

A delivery that got its 200 is the bot's from then on: if the bot loses it, nothing sends it again.
The edge records every acknowledgement (which bot, when) for the audit. Each bot's log says when
it has handed an event on (delivered, queued in the inbox, or answered that it could not keep it);
`quiet()` waits for that before a bot may be killed, for the drill's mix that spares the moments a
bot holds an acknowledged event only in memory.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from dataclasses import dataclass, field
from typing import Literal

import aiohttp

from harness.chaos.deployment import SECRET, Bot
from harness.fakes.slack_api import Delivery, FakeSlackApi, signed_headers

# Slack's own limit: no 200 within 3 s and the delivery has failed (it is then sent again).
ACK_TIMEOUT = 3.0
# Slack retries a failed delivery three times, over minutes; the drill, compressed, keeps trying
# every few seconds until a bot acknowledges it.
RETRY_CAP = 5.0
# An acknowledged event a bot has not logged as handed on after this long (a click its pre-check
# refused, which logs nothing) counts as handled for quiet(): the slowest hand-on seen is a
# Temporal call's 5 s timeout and the inbox write after it.
SETTLE_AFTER = 20.0

_HANDED_ON = re.compile(
    r"slack event (\S+) in |could not route Slack event (\S+)|slack click (\S+) on "
)


@dataclass(frozen=True)
class Ack:
    kind: Literal["message", "click"]
    key: str  # a message's event id; a click's id (its action_ts)
    bot: str
    at: float  # time.monotonic() of the 200
    wall: float  # time.time() of the 200
    attempts: int
    message_ts: str | None = None  # a message's own id in Slack
    thread: str | None = None
    user: str | None = None  # who sent it
    sent_wall: float = 0.0  # time.time() when this attempt went out


@dataclass
class SlackEdge:
    bots: list[Bot]
    http: aiohttp.ClientSession
    rng: random.Random
    slack: FakeSlackApi
    acks: list[Ack] = field(default_factory=list)
    failed_attempts: int = 0
    _in_flight: int = 0
    _open: asyncio.Event = field(default_factory=asyncio.Event)
    _handed_on: set[str] = field(default_factory=set)
    _log_offsets: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._open.set()

    async def deliver(
        self,
        delivery: Delivery,
        *,
        kind: Literal["message", "click"],
        key: str,
        message_ts: str | None = None,
        thread: str | None = None,
        user: str | None = None,
        to: Bot | None = None,
        record: bool = True,
    ) -> Ack:
        """Until a bot answers 200 (`to`: that bot only). Recorded unless `record` is False."""
        attempt = 0
        while True:
            await self._open.wait()
            bot = to or self.rng.choice(self.bots)
            headers = signed_headers(SECRET, delivery, retry_num=attempt or None)
            sent = time.time()
            self._in_flight += 1
            try:
                async with self.http.post(
                    bot.url,
                    data=delivery.body,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=ACK_TIMEOUT),
                ) as response:
                    await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            finally:
                self._in_flight -= 1
            if status == 200:
                ack = Ack(
                    kind, key, bot.name, time.monotonic(), time.time(), attempt + 1, message_ts,
                    thread, user, sent,
                )  # fmt: skip
                if record:
                    self.acks.append(ack)
                return ack
            self.failed_attempts += 1
            attempt += 1
            await asyncio.sleep(min(RETRY_CAP, 2.0 ** (attempt - 1)))

    def _read_logs(self) -> None:
        for bot in self.bots:
            path = bot.service.log_path
            offset = self._log_offsets.get(bot.name, 0)
            try:
                with path.open("rb") as log:
                    log.seek(offset)
                    chunk = log.read()
            except OSError:
                continue
            # Only whole lines: the last one may still be being written.
            whole = chunk.rfind(b"\n") + 1
            self._log_offsets[bot.name] = offset + whole
            for match in _HANDED_ON.finditer(chunk[:whole].decode(errors="replace")):
                self._handed_on.add(next(g for g in match.groups() if g))

    def _answered_privately(self, ack: Ack) -> bool:
        """A click the bot answered only to its clicker (refused, or its pre-check failed): an
        ephemeral message to them since the click went out."""
        return ack.kind == "click" and any(
            e["user"] == ack.user and float(e["message_ts"]) >= ack.sent_wall
            for e in self.slack.ephemerals
        )

    def unsettled(self, bot: str) -> list[Ack]:
        """Events `bot` acknowledged and may still hold only in memory."""
        self._read_logs()
        now = time.monotonic()
        return [
            ack
            for ack in self.acks
            if ack.bot == bot
            and ack.key not in self._handed_on
            and not self._answered_privately(ack)
            and now - ack.at < SETTLE_AFTER
        ]

    async def quiet(self, bot: str, timeout: float) -> bool:
        """Hold new deliveries; wait until none is in flight and `bot` has handed on every event
        it acknowledged. True when quiet (the caller then does its deed and calls reopen())."""
        self._open.clear()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._in_flight == 0 and not self.unsettled(bot):
                return True
            await asyncio.sleep(0.1)
        return False

    def reopen(self) -> None:
        self._open.set()

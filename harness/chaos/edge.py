"""Slack's side of the wire: each customer event POSTed, signed, to a bot, retried until one acks.

    deliver(delivery) -> a bot chosen as a load balancer would -> HTTP 200 within 3 s: acknowledged
        (Slack never sends it again) | refused, reset or slow -> sent again, X-Slack-Retry-Num

A delivery that got its 200 is the bot's from then on: if the bot loses it, nothing sends it again.
The edge records every acknowledgement (which bot, when) for the audit.
"""

from __future__ import annotations

import asyncio
import random
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

    async def deliver(
        self,
        delivery: Delivery,
        *,
        kind: Literal["message", "click"],
        key: str,
        message_ts: str | None = None,
        thread: str | None = None,
        user: str | None = None,
    ) -> Ack:
        """Until a bot answers 200; the acknowledgement recorded for the audit."""
        attempt = 0
        while True:
            bot = self.rng.choice(self.bots)
            headers = signed_headers(SECRET, delivery, retry_num=attempt or None)
            sent = time.time()
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
            if status == 200:
                ack = Ack(
                    kind, key, bot.name, time.monotonic(), time.time(), attempt + 1, message_ts,
                    thread, user, sent,
                )  # fmt: skip
                self.acks.append(ack)
                return ack
            self.failed_attempts += 1
            attempt += 1
            await asyncio.sleep(min(RETRY_CAP, 2.0 ** (attempt - 1)))

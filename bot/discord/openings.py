"""A customer's opening message: kept first, its thread opened with retries, then delivered.

    opening message in the support channel
        -> kept in the inbox, waiting for its thread (before any request to Discord is made)
        -> POST /channels/{support}/messages/{message}/threads
             ... 5xx, no answer, a connection reset, a refusal -> again after a backoff (one line)
             ... 400 code 160004: the message has its thread already (another replica's, or an
                 earlier attempt Discord did without answering) -> open
             ... 404 code 10008: the message was deleted -> forgotten, with nothing to answer
        -> released: delivered to Temporal (signal-with-start); the router's notice in the thread
    not open DISCORD_THREAD_DELAY_NOTICE_SECONDS after it came -> one reply to the message, once
    a client logs in (a restart, a replica taking the gateway over) -> every opening the inbox
        still holds is resumed where its backoff stood

A thread opened on a message takes the message's id, so the conversation's Workflow ID
(discord-<guild>-<message id>) is known before Discord answers. The Workflow is started only once
the thread exists, so the agent's first question always has a thread to go to; until then the
entry holds back anything else of its conversation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from functools import partial
from typing import TYPE_CHECKING

import aiohttp
import discord
from discord.http import MultipartParameters

from bot.conversations import NOTICES, Routed, Waiting, WaitingRouter
from bot.discord.render import fit_content
from bot.discord.replies import say
from bot.discord.settings import DiscordSettings
from bot.keyed_locks import KeyedLocks
from bot.reconnect import Backoff, one_line

if TYPE_CHECKING:  # discord.types is for type checkers: imported first, it is a circular import
    from discord.types.threads import ThreadArchiveDuration

log = logging.getLogger(__name__)

WAITS_FOR = "discord-thread"  # what an opening waits for in the inbox
# A week: an escalation can wait days for a person. A post into an archived thread reopens it.
THREAD_ARCHIVE_MINUTES: ThreadArchiveDuration = 10080
THREAD_ALREADY_EXISTS = 160004  # Discord's error code: this message already has a thread
UNKNOWN_MESSAGE = 10008  # Discord's error code: no such message (deleted as soon as posted)
DELAYED = (
    "Thanks, I have your message: its thread is taking longer than usual to open, and the agent "
    "will answer you there as soon as it does."
)


class Found(Enum):
    """What an attempt found, when it did not fail."""

    OPEN = "open"  # the thread is open: this attempt's, or one already there
    GONE = "gone"  # the message was deleted


# What one request to Discord may fail with when Discord or the network is away: one line, never
# a traceback, and another attempt.
UNAVAILABLE = (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError)


@dataclass(frozen=True)
class OpeningRetry:
    """How an opening is retried: each attempt bounded, the next after a capped backoff."""

    attempt_seconds: float = 60.0  # discord.py's own retries of a 500 (about 25 s) fit inside
    backoff: Backoff = field(default_factory=lambda: Backoff(first=1.0, cap=60.0))
    notice_after: float = 30.0  # the customer is told it is late once it has waited this long

    @classmethod
    def from_settings(cls, settings: DiscordSettings) -> OpeningRetry:
        cap = settings.thread_retry_cap_seconds
        return cls(
            attempt_seconds=settings.thread_attempt_seconds,
            backoff=Backoff(first=min(1.0, cap), cap=cap),
            notice_after=settings.thread_delay_notice_seconds,
        )


def waited(waiting: Waiting) -> float:
    """Seconds since the opening was kept."""
    return time.time() - datetime.fromisoformat(waiting.queued_at).timestamp()


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


class ThreadOpenings:
    """The openings one logged-in client is opening: one task each, cancelled when it closes.

    Each holds its thread's arrival-order lock (`arrival`, the client's) through each attempt
    and, once the thread is open, through its delivery: a reply in the new thread reaches the
    router after the opening, and one written between attempts is kept at once, behind it."""

    def __init__(
        self,
        client: discord.Client,
        router: WaitingRouter,
        arrival: KeyedLocks,
        retry: OpeningRetry,
    ) -> None:
        self._client = client
        self._router = router
        self._arrival = arrival
        self._retry = retry
        self._tasks: dict[int, asyncio.Task[None]] = {}  # by inbox entry

    def open(self, waiting: Waiting) -> None:
        """Open the thread of a kept opening and deliver it, in a task of its own."""
        seq = waiting.kept.seq
        if seq in self._tasks:
            return
        task = asyncio.create_task(self._open(waiting), name=f"thread on {waiting.kept.event_id}")
        self._tasks[seq] = task
        task.add_done_callback(partial(self._ended, seq))

    def _ended(self, seq: int, task: asyncio.Task[None]) -> None:
        self._tasks.pop(seq, None)
        if not task.cancelled() and task.exception() is not None:
            # A bug, not an outage: the entry stays in the inbox and the next login resumes it.
            log.error("opening %d failed; resumed at next login", seq, exc_info=task.exception())

    async def resume(self) -> None:
        """Open every thread the inbox still waits for: a restarted bot's, another replica's."""
        failures = 0
        while True:
            try:
                held = await self._router.waiting(WAITS_FOR)
                break
            except Exception as err:  # the inbox's database: it outlives the outage
                failures += 1
                delay = self._retry.backoff.delay(failures)
                log.warning(
                    "discord: cannot read the openings waiting in the inbox (%s); again in %.1fs",
                    one_line(err),
                    delay,
                )
                await asyncio.sleep(delay)
        if held:
            log.info("discord: resuming %d opening(s) whose thread is not open yet", len(held))
        for waiting in held:
            self.open(waiting)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _open(self, waiting: Waiting) -> None:
        """Attempt until the thread is open, then deliver; or forget a deleted message."""
        channel_id, message_id = int(waiting.thread.channel), int(waiting.thread.thread)
        attempts, retry_at = waiting.attempts, waiting.retry_at
        # Past the notice already when this process took it up: told by whoever had it then.
        told = waited(waiting) >= self._retry.notice_after
        while True:
            if retry_at is not None:  # never past the cap: a clock moved, a cap lowered
                await asyncio.sleep(min(max(0.0, retry_at - time.time()), self._retry.backoff.cap))
            # The thread's lock for one attempt (bounded), and on to the delivery once it opens:
            # a reply in the new thread reaches the router after the opening. Between attempts a
            # reply is kept at once, behind the opening in the inbox.
            async with self._arrival.hold(message_id):
                why = await self._attempt(waiting)
                if why is Found.OPEN:
                    await self._deliver(waiting)
                    return
                if why is Found.GONE:
                    await self._forget(waiting)
                    return
            attempts += 1
            delay = self._retry.backoff.delay(attempts)
            retry_at = time.time() + delay
            log.warning(
                "discord: could not open a thread on message %s (attempt %d: %s); it is kept in "
                "the inbox, next try in %.1fs",
                message_id,
                attempts,
                why,
                delay,
            )
            await self._note(waiting, why, retry_at)
            if not told and waited(waiting) >= self._retry.notice_after:
                told = True
                await self.reply(channel_id, message_id, DELAYED, nonce=f"late{message_id}")

    async def _attempt(self, waiting: Waiting) -> Found | str:
        """One bounded attempt: what it found, or why it failed."""
        channel_id, message_id = int(waiting.thread.channel), int(waiting.thread.thread)
        try:
            async with asyncio.timeout(self._retry.attempt_seconds):
                await self._client.http.start_thread_with_message(
                    channel_id,
                    message_id,
                    name=fit_content(f"Refund request from {waiting.author.label}", 100),
                    auto_archive_duration=THREAD_ARCHIVE_MINUTES,
                    rate_limit_per_user=None,
                )
            return Found.OPEN
        except discord.HTTPException as err:
            if err.code == THREAD_ALREADY_EXISTS:
                # A thread on a message has the message's id: that one is this conversation's.
                log.info("message %s has its thread already; it is used", message_id)
                return Found.OPEN
            if err.code == UNKNOWN_MESSAGE:
                log.warning("message %s was gone before its thread opened", message_id)
                return Found.GONE
            why = one_line(err)
            if err.status < 500:
                why += (
                    "; the bot needs Create Public Threads and Send Messages in Threads in the "
                    "support channel"
                )
            return why
        except TimeoutError:
            return f"no answer within {self._retry.attempt_seconds:g}s"
        except (aiohttp.ClientError, OSError) as err:
            return one_line(err)

    async def _deliver(self, waiting: Waiting) -> None:
        routed = await self._release(waiting)
        notice = NOTICES.get(routed)
        if notice is not None:
            thread = self._client.get_partial_messageable(
                int(waiting.thread.thread),
                guild_id=int(waiting.thread.workspace),
                type=discord.ChannelType.public_thread,
            )
            await say(thread, notice)

    async def _note(self, waiting: Waiting, why: str, retry_at: float) -> None:
        try:
            await self._router.note_wait(waiting.kept, why, retry_at)
        except Exception as err:  # the inbox's database: the backoff goes on here meanwhile
            log.warning("could not record the attempt in the inbox (%s)", one_line(err))

    async def _release(self, waiting: Waiting) -> Routed:
        """Hand the opening on to the router, however long its inbox takes to answer."""
        failures = 0
        while True:
            try:
                return await self._router.release(waiting.kept)
            except Exception as err:  # the inbox's database: the thread is open, the entry kept
                failures += 1
                delay = self._retry.backoff.delay(failures)
                log.warning(
                    "discord: thread %s is open but the inbox cannot release it (%s); again in "
                    "%.1fs",
                    waiting.thread.thread,
                    one_line(err),
                    delay,
                )
                await asyncio.sleep(delay)

    async def _forget(self, waiting: Waiting) -> None:
        try:
            await self._router.withdraw(waiting.kept)
        except Exception as err:  # left waiting: the next login finds it gone again
            log.warning("could not forget deleted message %s (%s)", waiting.kept.event_id, err)

    async def reply(self, channel_id: int, message_id: int, text: str, *, nonce: str) -> None:
        """One plain sentence as a reply to a customer's message; a failure is one line. The
        enforced nonce makes a second try (another replica's) return the first."""
        payload = {
            "content": text,
            "message_reference": {"message_id": str(message_id), "fail_if_not_exists": False},
            "allowed_mentions": {"parse": [], "replied_user": False},
            "nonce": nonce[:25],
            "enforce_nonce": True,
        }
        params = MultipartParameters(payload=payload, multipart=None, files=None)
        try:
            async with asyncio.timeout(self._retry.attempt_seconds):
                await self._client.http.send_message(channel_id, params=params)
        except UNAVAILABLE as err:
            log.warning(
                "could not reply to message %s in channel %s (%s)",
                message_id,
                channel_id,
                one_line(err),
            )

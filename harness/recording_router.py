"""A router that records: what an adapter hands the router, with no Temporal behind it.

    adapter -> RecordingRouter.keep / on_message / on_click -> recorded -> the result a test chose

It is a bot.conversations.WaitingRouter, so an adapter takes it where it takes the real one. A test
sets what it answers (`message_result`, `click_result`), makes it fail (`message_error`,
`click_error`), or makes it slow (`gate`: Temporal taking its time). A message kept waiting for its
adapter (`keep_waiting`) is in `held` until `release` hands it on as `on_message` would; a second
RecordingRouter given the same `held` and `held_messages` is a restarted bot reading one inbox.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from bot.conversations import (
    InboundClick,
    InboundMessage,
    Kept,
    Routed,
    UnreadableEvent,
    Waiting,
)
from bot.ids import workflow_id_for


@dataclass
class RecordingRouter:
    # None: STARTED for a message that opens a thread, SIGNALLED for any other.
    message_result: Routed | None = None
    click_result: Routed = Routed.SIGNALLED
    message_error: Exception | None = None  # raised by on_message: the router could not keep it
    click_error: Exception | None = None  # raised by on_click
    # While set and not yet open, on_message waits (after `arrived`, before `messages`) ...
    gate: asyncio.Event | None = None
    slow_text: str | None = None  # ... only for the message with this text, when set
    arrived: list[InboundMessage] = field(default_factory=list)  # handed over, in arrival order
    messages: list[InboundMessage] = field(default_factory=list)  # answered (past the gate)
    clicks: list[InboundClick] = field(default_factory=list)
    accepted: set[str] = field(default_factory=set)  # event ids answered without an error
    unreadable: list[UnreadableEvent] = field(default_factory=list)  # kept as dead letters
    kept: list[InboundMessage] = field(default_factory=list)  # written ahead, before the ack
    keep_error: Exception | None = None  # raised by keep: the inbox could not take it
    held: dict[int, Waiting] = field(default_factory=dict)  # kept for their adapter, by seq
    held_messages: dict[int, InboundMessage] = field(default_factory=dict)
    released: list[InboundMessage] = field(default_factory=list)
    withdrawn: list[InboundMessage] = field(default_factory=list)

    def seen(self, event_id: str) -> bool:
        return event_id in self.accepted

    async def keep(self, message: InboundMessage) -> Kept | Routed:
        if self.keep_error is not None:
            raise self.keep_error
        self.kept.append(message)
        return Kept(message.event_id, len(self.kept), message.thread.thread)

    async def keep_waiting(self, message: InboundMessage, waits_for: str) -> Kept | Routed:
        kept = await self.keep(message)
        assert isinstance(kept, Kept)
        kept = Kept(message.event_id, kept.seq, workflow_id_for(message.thread))
        now = datetime.now(UTC).isoformat()
        self.held[kept.seq] = Waiting(kept, message.thread, message.author, now, 0, None)
        self.held_messages[kept.seq] = message
        self.accepted.add(message.event_id)
        return kept

    async def waiting(self, waits_for: str) -> list[Waiting]:
        return [self.held[seq] for seq in sorted(self.held)]

    async def note_wait(self, kept: Kept, error: str, retry_at: float) -> None:
        waiting = self.held[kept.seq]
        self.held[kept.seq] = replace(waiting, attempts=waiting.attempts + 1, retry_at=retry_at)

    async def release(self, kept: Kept) -> Routed:
        del self.held[kept.seq]
        message = self.held_messages.pop(kept.seq)
        self.released.append(message)
        return await self.on_message(message)

    async def withdraw(self, kept: Kept) -> None:
        del self.held[kept.seq]
        self.withdrawn.append(self.held_messages.pop(kept.seq))

    async def on_message(self, message: InboundMessage) -> Routed:
        self.arrived.append(message)
        if self.gate is not None and self.slow_text in (None, message.text):
            await self.gate.wait()
        self.messages.append(message)
        if self.message_error is not None:
            raise self.message_error
        self.accepted.add(message.event_id)
        if self.message_result is not None:
            return self.message_result
        return Routed.STARTED if message.opens_thread else Routed.SIGNALLED

    async def keep_unreadable(self, event: UnreadableEvent) -> None:
        self.unreadable.append(event)

    async def on_click(self, click: InboundClick) -> Routed:
        self.clicks.append(click)
        if self.click_error is not None:
            raise self.click_error
        self.accepted.add(click.event_id)
        return self.click_result

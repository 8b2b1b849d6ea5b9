"""One Discord guild for the Discord tests: its ids, its people, and a router that records.

    seed_guild(FakeDiscordAPI) -> the guild, #support, #general, the approver role, six members

The same guild serves the in-process client tests (tests/test_discord_client.py, through
discord.py's parsers), the gateway tests and the end-to-end run of the real process.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from bot.conversations import InboundClick, InboundMessage, Routed
from harness.fakes.discord_api import FakeDiscordAPI, _user

GUILD = 1170000000000000007
SUPPORT = 1170000000000000009
OTHER = 1170000000000000011
APPROVER_ROLE = 1170000000000000100
APPROVER_ROLE_NAME = "Refund Approver"

CUSTOMER = 1180000000000000101
AGENT = 1180000000000000102  # holds the approver role
STRANGER = 1180000000000000103  # a member with no role and no grant
PRESENTER = 1180000000000000104  # presenter grant in the store
ADMIN = 1180000000000000105  # admin grant in the store
OTHER_BOT = 1180000000000000106


def seed_guild(api: FakeDiscordAPI) -> None:
    """What a server admin sets up in Discord before inviting the bot."""
    api.add_guild(GUILD)
    api.add_text_channel(GUILD, SUPPORT, "support")
    api.add_text_channel(GUILD, OTHER, "general")
    api.add_role(GUILD, APPROVER_ROLE, APPROVER_ROLE_NAME)
    api.add_member(GUILD, _user(CUSTOMER, "nyghtowl"))
    api.add_member(GUILD, _user(AGENT, "sam"), roles=(APPROVER_ROLE,), nick="Sam (support)")
    api.add_member(GUILD, _user(STRANGER, "mallory"))
    api.add_member(GUILD, _user(PRESENTER, "pat"))
    api.add_member(GUILD, _user(ADMIN, "ada"))
    api.add_member(GUILD, _user(OTHER_BOT, "otherbot", bot=True))


@dataclass
class RecordingRouter:
    """The router's interface, recording what the adapter handed it; accepts every event once."""

    message_result: Routed = Routed.STARTED
    click_result: Routed = Routed.SIGNALLED
    click_error: Exception | None = None
    check_result: Routed | None = None  # what check_click answers (None: the click may count)
    gate: asyncio.Event | None = None  # when set: every on_message waits for it after recording
    messages: list[InboundMessage] = field(default_factory=list)
    clicks: list[InboundClick] = field(default_factory=list)
    checked: list[InboundClick] = field(default_factory=list)
    accepted: set[str] = field(default_factory=set)

    def seen(self, event_id: str) -> bool:
        return event_id in self.accepted

    async def on_message(self, message: InboundMessage) -> Routed:
        self.messages.append(message)
        if self.gate is not None:
            await self.gate.wait()
        self.accepted.add(message.event_id)
        return self.message_result

    async def on_click(self, click: InboundClick) -> Routed:
        self.clicks.append(click)
        if self.click_error is not None:
            raise self.click_error
        self.accepted.add(click.event_id)
        return self.click_result

    async def check_click(self, click: InboundClick) -> Routed | None:
        self.checked.append(click)
        return self.check_result

"""One Discord guild for the Discord tests: its ids and its people.

    seed_guild(FakeDiscordAPI) -> the guild, #support, #general, the approver role, six members

The same guild serves the in-process client tests (tests/test_discord_client.py, through
discord.py's parsers), the gateway tests and the end-to-end run of the real process.
"""

from __future__ import annotations

from harness.fakes.discord_api import FakeDiscordAPI, user_object

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
    api.add_member(GUILD, user_object(CUSTOMER, "nyghtowl"))
    api.add_member(GUILD, user_object(AGENT, "sam"), roles=(APPROVER_ROLE,), nick="Sam (support)")
    api.add_member(GUILD, user_object(STRANGER, "mallory"))
    api.add_member(GUILD, user_object(PRESENTER, "pat"))
    api.add_member(GUILD, user_object(ADMIN, "ada"))
    api.add_member(GUILD, user_object(OTHER_BOT, "otherbot", bot=True))

"""Discord's gateway events refund-bot handles, checked before discord.py parses them.

    MESSAGE_CREATE, INTERACTION_CREATE -> the fields refund-bot reads, typed (MessageCreate,
        InteractionCreate) -> discord.py's parser -> on_message, a button, a slash command
                                    ... does not fit, or discord.py cannot parse it
                                    -> one line; a message or a click kept as a dead letter
    a slash command's options -> CheckedCommandTree (discord.py reads them) ... cannot
                                    -> one line, and the caller is told

discord.py's parsers trust the gateway: a field of an unexpected type raises in the parser (a
TypeError out of `int()`, a KeyError), which ends the gateway connection; and a few fields it
passes on as they came (a message's `content`, its `type`, a member's nick) raised later in
refund-bot's handlers. The gateway sends an event once (a RESUME picks up after it), so an event
that cannot be read is kept with its payload and why, never dropped, and the connection carries
on. Other events go to discord.py as they are: refund-bot reads nothing of them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Annotated, Any, Literal

import discord
from discord import app_commands
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bot.conversations import Router, keep_unreadable
from bot.discord.replies import tell_privately

log = logging.getLogger(__name__)

# A Discord id: a 64-bit integer, sent as a string of ASCII digits (int() of a long string raised).
Snowflake = Annotated[str, Field(pattern=r"^[0-9]{1,20}$")]
Parser = Callable[[dict[str, Any]], None]
# The gateway events whose payloads refund-bot reads, and what each would have been.
GUARDED: dict[str, Literal["message", "click"]] = {
    "MESSAGE_CREATE": "message",
    "INTERACTION_CREATE": "click",
}
_MAX_CUSTOM_ID = 100  # Discord's limit; the buttons' template matches longer ones too
_UNPARSABLE = (ValidationError, TypeError, ValueError, KeyError, AttributeError, IndexError)


class _Shape(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class _User(_Shape):
    # discord.py reads each of these with [], inside a KeyError it swallows: a user missing one
    # comes out with no author at all, which the handlers then read.
    id: Snowflake
    username: str
    discriminator: str
    avatar: str | None
    global_name: str | None = None
    bot: bool | None = None


class _Member(_Shape):
    nick: str | None = None
    user: _User | None = None  # in an interaction; a message's member leaves it out


class MessageCreate(_Shape):
    """A message, as far as discord.py passes its fields on unchecked and refund-bot reads them."""

    id: Snowflake
    channel_id: Snowflake
    guild_id: Snowflake | None = None
    webhook_id: Snowflake | None = None
    type: int
    content: str
    author: _User
    member: _Member | None = None


class _Button(_Shape):
    """A button on the clicked message, as discord.py rebuilds it (ui.Button.from_component)."""

    type: Literal[2]  # the Worker's messages carry buttons only; a row inside a row, never
    style: int
    label: str | None = None
    custom_id: str | None = None
    url: str | None = None
    disabled: bool = False
    emoji: dict[str, Any] | None = None
    sku_id: Snowflake | None = None
    id: int | None = None


class _Row(_Shape):
    type: Literal[1]
    components: list[_Button]
    id: int | None = None


class _ClickedMessage(_Shape):
    """The message a button was on: discord.py rebuilds its buttons from it (View.from_message)
    in a task of its own, whose failure nothing would catch."""

    id: Snowflake
    content: str
    flags: int = 0
    components: list[_Row]  # a message with a button has them; discord.py reads them unasked


class _ComponentData(_Shape):
    custom_id: str = Field(max_length=_MAX_CUSTOM_ID)
    component_type: int


class _Option(_Shape):
    name: str
    type: int
    value: str | int | float | bool | None = None
    focused: bool | None = None
    options: list[_Option] = []  # a subcommand's (discord.py iterates it: never null)

    @model_validator(mode="after")
    def _value_of_its_type(self) -> _Option:
        # discord.py hands a value on as it came: a string option holding a number reaches the
        # command as an int, where str methods raise. (What an autocomplete's focused option
        # holds is the text typed so far, whatever the type.)
        expected = _OPTION_VALUE_TYPES.get(self.type)
        if expected and self.value is not None and not self.focused:
            held = type(self.value)
            if held not in expected:
                raise ValueError(f"an option of type {self.type} holds a {held.__name__}")
        return self


# The value each option type holds (Discord's ApplicationCommandOptionType): users, channels,
# roles, mentionables and attachments are snowflakes, sent as strings.
_OPTION_VALUE_TYPES: dict[int, tuple[type, ...]] = {
    3: (str,),
    4: (int,),
    5: (bool,),
    6: (str,),
    7: (str,),
    8: (str,),
    9: (str,),
    10: (int, float),
    11: (str,),
}


class _CommandData(_Shape):
    id: Snowflake
    name: str
    guild_id: Snowflake | None = None
    # A slash command, a user's or a message's context menu, an entry point: discord.py makes
    # an enum of it, and an unknown one raises where nothing catches it.
    type: Literal[1, 2, 3, 4] = 1
    options: list[_Option] = []  # discord.py iterates these and reads the maps: never null
    # users, members, channels, roles, …: each a map of ids to objects.
    resolved: dict[str, dict[Snowflake, dict[str, Any]]] = {}


class InteractionCreate(_Shape):
    """A click or a slash command, as far as refund-bot reads it past discord.py."""

    id: Snowflake
    application_id: Snowflake
    type: int
    token: str
    guild_id: Snowflake | None = None
    channel_id: Snowflake | None = None
    member: _Member | None = None
    user: _User | None = None
    message: _ClickedMessage | None = None
    data: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _someone_did_it(self) -> InteractionCreate:
        # discord.py reads who did it from `member` in a guild and from `user` elsewhere, and
        # leaves the other unread: an interaction with neither has nobody (MISSING) to act for.
        if self.guild_id is not None and (self.member is None or self.member.user is None):
            raise ValueError("in a guild, and no `member.user`")
        if self.guild_id is None and self.user is None:
            raise ValueError("outside a guild, and no `user`")
        return self


def check(event: str, data: Any) -> None:
    """Raise ValidationError when a GUARDED event's payload does not fit what refund-bot reads."""
    if event == "MESSAGE_CREATE":
        MessageCreate.model_validate(data)
        return
    interaction = InteractionCreate.model_validate(data)
    if interaction.type == 3:  # a button
        _ComponentData.model_validate(interaction.data)
    elif interaction.type in (2, 4):  # a slash command, its autocomplete
        _CommandData.model_validate(interaction.data)


def why(err: Exception) -> str:
    """One line: the first field that does not fit, or what discord.py raised."""
    if isinstance(err, ValidationError):
        first = err.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "payload"
        return f"`{where}`: {first['msg']}"
    text = str(err).splitlines()[0][:200] if str(err) else ""
    return f"discord.py cannot parse it ({type(err).__name__}: {text})"


def _a_command(data: Any) -> bool:
    # A slash command, its autocomplete, a modal: an interaction of another type may be a click.
    return isinstance(data, dict) and type(data.get("type")) is int and data["type"] in (2, 4, 5)


def guard_parsers(parsers: dict[str, Parser], router: Router) -> None:
    """Check GUARDED events before discord.py's parsers take them (in place: discord.py's
    gateway reads this very dict); what does not fit is kept through `router`."""
    kept: set[asyncio.Task[None]] = set()

    for event, kind in GUARDED.items():
        parse = parsers[event]

        def checked(
            data: dict[str, Any],
            event: str = event,
            kind: Literal["message", "click"] = kind,
            parse: Parser = parse,
        ) -> None:
            try:
                check(event, data)
                parse(data)
            # What discord.py raises on a payload of the wrong shape (a bug of its own would look
            # the same): the event is kept either way, and the connection goes on.
            except _UNPARSABLE as err:
                log.warning("discord: a %s event does not fit: %s", event, why(err))
                if kind == "click" and _a_command(data):
                    return  # not a customer's words nor a decision: Discord tells its caller
                task = asyncio.get_running_loop().create_task(
                    keep_unreadable(router, "discord", kind, data, why(err))
                )
                kept.add(task)  # held until done: the loop keeps only a weak reference
                task.add_done_callback(kept.discard)

        parsers[event] = checked


# What the caller of a slash command discord.py cannot read is told.
UNREADABLE_COMMAND = "Discord sent this command in a form refund-bot cannot read; nothing was done."


class CheckedCommandTree(app_commands.CommandTree):
    """discord.py's command tree, a command whose options it cannot read answered in one line.

    The tree reads a command's options (and the users, members and channels they name) in a task
    of its own; what it raises there, other than its own AppCommandError, nothing catches, and
    asyncio logs it at ERROR with a traceback. Nor can the tree's error handler take it: it reads
    the same options again. An error of the command's own work still comes as discord.py's
    CommandInvokeError, to the tree's handler, as before.
    """

    async def _call(self, interaction: discord.Interaction[Any]) -> None:
        try:
            await super()._call(interaction)
        except _UNPARSABLE as err:
            log.warning("discord: a slash command discord.py cannot read: %s", why(err))
            try:
                await tell_privately(interaction, UNREADABLE_COMMAND)
            except discord.HTTPException as failed:
                log.warning("discord: could not tell its caller: %s %s", failed.status, failed.text)

"""The slash commands' handlers: /crash-worker and /refund-…, answered privately to the caller.

    /crash-worker, /refund-… -> bot.commands.Commands -> ephemeral answer
    /refund-demo             -> Commands.refund_demo(actor, action, Discord's stage, this channel)

Names, descriptions, choices and permissions come from the manifest (commands_spec); here are only
the handlers, whose parameters commands_spec.mismatches checks against it. Every answer is
ephemeral: only the caller sees it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import discord
from discord import app_commands

from agent import tracing
from agent.models import Actor, ThreadRef
from bot.commands import ChannelRef, ChatCommands, CommandReply, Conversation, DemoStage, DemoStages
from bot.discord.actors import actor_for
from bot.discord.commands_spec import command_spec
from bot.discord.edge import UNREADABLE_COMMAND
from bot.discord.parts import BotParts
from bot.discord.replies import FAILED, finished_within, tell_privately
from bot.ids import workflow_id_for

log = logging.getLogger(__name__)

Command = app_commands.Command[Any, ..., None]

WHICH_CONVERSATION = (
    "Which conversation? Run this inside the conversation's thread, or give `conversation:` a "
    "thread link, a thread id or a Workflow ID."
)
WHICH_CHANNEL = "Run /refund-demo in the support channel: its two threads open there."
OUT_OF_DATE = "This command is out of date here; run `refund-bot discord sync-commands`."
_NOT_OURS = (
    app_commands.CommandNotFound,
    app_commands.CommandSignatureMismatch,
    app_commands.TransformerError,
)
# Discord's ids are up to 20 digits; int() of a longer run of digits raised (past 4,300).
_LINK = re.compile(r"channels/([0-9]{1,20})/([0-9]{1,20})(?:/([0-9]{1,20}))?")


def build_commands(parts: BotParts, manifest: tuple[dict[str, Any], ...]) -> list[Command]:
    """The handlers as discord.py commands, described by the manifest."""
    commands = parts.commands

    async def crash_worker(interaction: discord.Interaction, host: str | None = None) -> None:
        actor = actor_for(interaction.user)
        await _answer(parts, interaction, lambda: commands.crash_worker(actor, host), defer=True)

    async def refund_status(
        interaction: discord.Interaction, conversation: str | None = None
    ) -> None:
        await _answer_for_conversation(
            parts, interaction, conversation, commands.refund_status, defer=True
        )

    async def refund_release(
        interaction: discord.Interaction, conversation: str | None = None
    ) -> None:
        await _answer_for_conversation(
            parts, interaction, conversation, commands.refund_release, defer=False
        )

    async def refund_hold(interaction: discord.Interaction, state: str | None = None) -> None:
        actor = actor_for(interaction.user)
        enabled = None if state is None else state == "on"
        await _answer(parts, interaction, lambda: commands.refund_hold(actor, enabled), defer=False)

    async def refund_grant(
        interaction: discord.Interaction, user: discord.User, role: str, limit: str | None = None
    ) -> None:
        actor, target = actor_for(interaction.user), actor_for(user)
        await _answer(
            parts,
            interaction,
            lambda: commands.refund_grant(actor, target, role, limit),
            defer=False,
        )

    async def refund_revoke(
        interaction: discord.Interaction, user: discord.User, role: str
    ) -> None:
        actor, target = actor_for(interaction.user), actor_for(user)
        await _answer(
            parts,
            interaction,
            lambda: commands.refund_revoke(actor, target, role),
            defer=False,
        )

    async def refund_demo(
        interaction: discord.Interaction,
        action: str | None = None,
        seconds: app_commands.Range[float, 0, 60] | None = None,
    ) -> None:
        channel, client = demo_channel(interaction), interaction.client
        if channel is None or client.user is None:
            await tell_privately(interaction, WHICH_CHANNEL)
            return
        actor = actor_for(interaction.user)
        me = client.user.id

        def stage(stages: DemoStages) -> DemoStage:
            # The gateway client's own HTTPClient: logged in, rate limits handled, api_url's.
            return stages.discord(client.http, me)

        # "auto 3", as the other platforms type it; Commands checks the words either way.
        words = (action or "") + (f" {seconds:g}" if seconds is not None else "")
        await _answer(
            parts,
            interaction,
            lambda: commands.refund_demo(actor, words, stage, channel),
            defer=False,
        )

    # The support team's: the escalations waiting, and a conversation taken over and back.
    async def refund_queue(interaction: discord.Interaction) -> None:
        actor = actor_for(interaction.user)
        await _answer(parts, interaction, lambda: commands.refund_queue(actor), defer=True)

    async def refund_takeover(
        interaction: discord.Interaction, conversation: str | None = None
    ) -> None:
        await _answer_for_conversation(
            parts, interaction, conversation, _taking(commands, True), defer=False
        )

    async def refund_handback(
        interaction: discord.Interaction, conversation: str | None = None
    ) -> None:
        await _answer_for_conversation(
            parts, interaction, conversation, _taking(commands, False), defer=False
        )

    handlers: dict[str, Callable[..., Coroutine[Any, Any, None]]] = {
        "crash-worker": crash_worker,
        "refund-status": refund_status,
        "refund-release": refund_release,
        "refund-hold": refund_hold,
        "refund-grant": refund_grant,
        "refund-revoke": refund_revoke,
        "refund-demo": refund_demo,
        "refund-queue": refund_queue,
        "refund-takeover": refund_takeover,
        "refund-handback": refund_handback,
    }
    return [_command(command_spec(name, manifest), handler) for name, handler in handlers.items()]


async def on_command_error(
    interaction: discord.Interaction, error: app_commands.AppCommandError
) -> None:
    """The command tree's error handler: log it, and tell the caller."""
    # CommandNotFound / CommandSignatureMismatch: Discord holds definitions other than the
    # manifest's (run sync-commands); a TransformerError: an option Discord sent does not fit
    # the handler's. One line each. Anything else is a bug, with its traceback; either way the
    # caller hears.
    if isinstance(error, _NOT_OURS):
        log.warning("Discord command refused: %s: %s", type(error).__name__, error)
    else:
        log.error("Discord command failed: %s", error, exc_info=error)
    text = FAILED
    if isinstance(error, app_commands.CommandNotFound | app_commands.CommandSignatureMismatch):
        text = OUT_OF_DATE
    elif isinstance(error, app_commands.TransformerError):
        text = UNREADABLE_COMMAND
    try:
        await tell_privately(interaction, text)
    except discord.HTTPException:
        log.warning("could not tell the caller", exc_info=True)


def conversation_for(
    interaction: discord.Interaction, given: str | None, support_channel_id: int
) -> str | None:
    """The Workflow ID a command means: `given` (link, thread id or Workflow ID), else the
    thread the command was run in."""
    guild = str(interaction.guild_id) if interaction.guild_id else None
    text = (given or "").strip()
    if text:
        link = _LINK.search(text)
        if link:
            link_guild, channel, message = link.groups()
            # A link to the opening message in the support channel names its thread too:
            # a thread on a message has the message's id.
            on_opening = message is not None and int(channel) == support_channel_id
            return _workflow_id(link_guild, message if on_opening else channel, support_channel_id)
        if text.isdigit() and guild:
            return _workflow_id(guild, text, support_channel_id)
        return text  # a Workflow ID
    channel = interaction.channel
    if isinstance(channel, discord.Thread) and guild:
        return _workflow_id(guild, str(channel.id), support_channel_id)
    return None


def demo_channel(interaction: discord.Interaction) -> ChannelRef | None:
    """Where /refund-demo opens its threads: the channel it was run in, or the thread's parent
    when run inside a thread. None outside a guild."""
    channel = interaction.channel
    if interaction.guild_id is None or channel is None:
        return None
    channel_id = channel.parent_id if isinstance(channel, discord.Thread) else channel.id
    return ChannelRef(
        platform="discord", workspace=str(interaction.guild_id), channel=str(channel_id)
    )


async def _answer(
    parts: BotParts,
    interaction: discord.Interaction,
    work: Callable[[], Awaitable[CommandReply]],
    *,
    defer: bool,
) -> None:
    """Run a command and show its reply to the caller only. `defer`: known to be slow."""
    name = interaction.command.name if interaction.command else "command"
    with tracing.span("discord.command", "server", platform="discord", command=f"/{name}") as span:
        if defer:
            await interaction.response.defer(ephemeral=True, thinking=True)
        task = asyncio.ensure_future(work())
        if not defer and not await finished_within(task, parts.response_budget):
            await interaction.response.defer(ephemeral=True, thinking=True)
        try:
            reply = await task
        except Exception:
            log.exception("/%s failed", name)
            reply = CommandReply(ok=False, text=FAILED)
        span.set(outcome="ok" if reply.ok else "refused")
        await tell_privately(interaction, reply.shown())


async def _answer_for_conversation(
    parts: BotParts,
    interaction: discord.Interaction,
    given: str | None,
    work: Callable[[Actor, Conversation], Awaitable[CommandReply]],
    *,
    defer: bool,
) -> None:
    async def named() -> str | CommandReply:
        # Read by Commands once the caller's role allows the command, not before.
        workflow_id = conversation_for(interaction, given, parts.support_channel_id)
        return workflow_id or CommandReply(ok=False, text=WHICH_CONVERSATION)

    actor = actor_for(interaction.user)
    await _answer(parts, interaction, lambda: work(actor, named), defer=defer)


def _taking(
    commands: ChatCommands, taken: bool
) -> Callable[[Actor, Conversation], Awaitable[CommandReply]]:
    """/refund-takeover (taken) or /refund-handback, for the conversation the command names
    (read once the caller's role allows it)."""

    async def work(actor: Actor, conversation: Conversation) -> CommandReply:
        return await commands.refund_takeover(actor, conversation, taken)

    return work


def _workflow_id(guild: str, thread: str, support_channel_id: int) -> str:
    return workflow_id_for(
        ThreadRef(
            platform="discord", workspace=guild, channel=str(support_channel_id), thread=thread
        )
    )


def _command(spec: dict[str, Any], callback: Callable[..., Coroutine[Any, Any, None]]) -> Command:
    """One discord.py command from its manifest entry and its handler."""
    options = spec.get("options") or []
    if options:
        callback = app_commands.describe(**{o["name"]: o["description"] for o in options})(callback)
    choices = {
        o["name"]: [app_commands.Choice(name=c["name"], value=c["value"]) for c in o["choices"]]
        for o in options
        if o.get("choices")
    }
    if choices:
        callback = app_commands.choices(**choices)(callback)
    command: Command = app_commands.Command(
        name=spec["name"],
        description=spec["description"],
        callback=callback,
        nsfw=spec.get("nsfw", False),
    )
    contexts = spec.get("contexts")
    if contexts is not None:
        command.allowed_contexts = app_commands.AppCommandContext(
            guild=0 in contexts, dm_channel=1 in contexts, private_channel=2 in contexts
        )
    installs = spec.get("integration_types", [0])
    command.allowed_installs = app_commands.AppInstallationType(
        guild=0 in installs, user=1 in installs
    )
    permissions = spec.get("default_member_permissions")
    command.default_permissions = (
        None if permissions is None else discord.Permissions(int(permissions))
    )
    return command

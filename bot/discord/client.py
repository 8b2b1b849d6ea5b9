"""The Discord inbound half: a discord.py gateway client for the support channel.

    customer message in the support channel -> public thread on it -> router.on_message (start)
    message in one of those threads         -> router.on_message -> `customer_message` Signal
    Approve / Deny button (DecisionButton)  -> pre-check, edit     -> router.on_click -> `approval`
    /crash-worker, /refund-… commands       -> bot.commands.Commands -> ephemeral answer

Messages from bots (this one included), system messages, edits and deletions never reach the
router: only MESSAGE_CREATE of a person's message is handled (discord.py dispatches edits and
deletions as other events, which this client does not listen to). The bot never pings anyone: every
send carries AllowedMentions.none(), and the client's default is the same.

Buttons are DynamicItems matched on their custom id (`refund:<action>:<workflow_id>`), registered
in setup_hook. The Worker posts them over REST; no View is stored anywhere, so a click works the
same after a bot restart, on any replica.

Discord waits 3 s for the first answer to an interaction. Every handler answers directly when its
work finishes inside RESPONSE_BUDGET, and otherwise defers (acknowledges now, answers later).

`api_url` (a proxy or tests.fakes.discord_api): the REST client is DiscordThreadPoster's
RoutedHTTPClient. Interaction responses do not go through it: discord.py sends them with its
webhook adapter, taken from the `async_context` ContextVar, so `login` sets a routed adapter in
the calling task's context, which every event task then inherits. Nothing process-wide is changed.
"""

from __future__ import annotations

import asyncio
import logging
import re
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import discord
from discord import app_commands
from discord.http import Route
from discord.webhook.async_ import AsyncWebhookAdapter, async_context

from agent.activities.authorize import GrantSource
from agent.models import Actor, ThreadRef
from bot.commands import CommandReply, Commands
from bot.conversations import NOTICES, ConversationRouter, InboundClick, InboundMessage, Routed, cut
from bot.discord.commands_spec import command_spec, load_manifest, mismatches, register_commands
from bot.discord.outbound import RoutedHTTPClient
from bot.discord.render import (
    CUSTOM_ID_TEMPLATE,
    Action,
    components_for,
    fit_content,
    parse_custom_id,
)
from bot.discord.settings import DiscordSettings
from bot.ids import workflow_id_for

log = logging.getLogger(__name__)

ApprovalCheck = Callable[[Actor], Awaitable[bool]]
# A message's channel when it may be a thread: cached (Thread) or not (PartialMessageable).
MaybeThread = discord.Thread | discord.PartialMessageable

# Answer directly when the work is done within this; defer past it. Discord's limit is 3 s and
# the answer itself still has to travel.
RESPONSE_BUDGET = 2.0
# A week: an escalation can wait days for a person. A post into an archived thread reopens it.
THREAD_ARCHIVE_MINUTES = 10080
THREAD_ALREADY_EXISTS = 160004  # Discord's error code: this message already has a thread
HUMAN_MESSAGE_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})
NO_PINGS = discord.AllowedMentions.none()

FAILED = "That did not work on our side; the bot's log has the details."
SORRY_NOT_PASSED_ON = (
    "Sorry, I could not pass that message on to the agent. Please send it again in a moment."
)
WHICH_CONVERSATION = (
    "Which conversation? Run this inside the conversation's thread, or give `conversation:` a "
    "thread link, a thread id or a Workflow ID."
)
CLICK_NOTICES: dict[Routed, str] = {
    Routed.QUEUED: "Your decision is recorded; the agent is briefly unavailable and will pick it "
    "up shortly.",
    Routed.CLOSED: "This conversation has already finished; your click changed nothing.",
    Routed.UNKNOWN: "This button belongs to no conversation I know; your click changed nothing.",
}
_LINK = re.compile(r"channels/(\d+)/(\d+)(?:/(\d+))?")


def approver_check(grants: GrantSource) -> ApprovalCheck:
    """The click pre-check from a live grant source: holds refund_approver right now.

    Only a courtesy to the clicker; the Workflow's authorize_refund reads the grants again before
    any refund and decides.
    """

    async def may_approve(actor: Actor) -> bool:
        return await grants.live_grant(actor, "refund_approver") is not None

    return may_approve


def actor_for(user: discord.abc.User) -> Actor:
    return Actor(platform="discord", user_id=str(user.id), display_name=user.display_name)


class DecisionButton(discord.ui.DynamicItem[discord.ui.Button], template=CUSTOM_ID_TEMPLATE):
    """An Approve or Deny button the Worker posted; the conversation rides in its custom id."""

    def __init__(self, item: discord.ui.Button, action: Action, workflow_id: str) -> None:
        super().__init__(item)
        self.action: Action = action
        self.workflow_id = workflow_id

    @classmethod
    def for_action(cls, action: Action, workflow_id: str) -> DecisionButton:
        [row] = components_for(workflow_id, [action])
        [spec] = row["components"]
        button: discord.ui.Button = discord.ui.Button(
            label=spec["label"],
            style=discord.ButtonStyle(spec["style"]),
            custom_id=spec["custom_id"],
        )
        return cls(button, action, workflow_id)

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str], /
    ) -> DecisionButton:
        parsed = parse_custom_id(match.string)
        if parsed is None or not isinstance(item, discord.ui.Button):
            raise ValueError(f"not a decision button: {match.string!r}")
        return cls(item, *parsed)

    async def callback(self, interaction: discord.Interaction) -> None:
        client = interaction.client
        if isinstance(client, RefundBotClient):
            await client.on_decision(interaction, self.action, self.workflow_id)


class _RoutedWebhookAdapter(AsyncWebhookAdapter):
    """discord.py's webhook adapter (interaction responses, followups), sent to `base_url`."""

    def __init__(self, base_url: str) -> None:
        super().__init__()
        self._base_url = base_url

    async def request(self, route: Route, *args: Any, **kwargs: Any) -> Any:
        if route.url.startswith(Route.BASE):
            route.url = self._base_url + route.url[len(Route.BASE) :]
        return await super().request(route, *args, **kwargs)


class RefundBotClient(discord.Client):
    def __init__(
        self,
        settings: DiscordSettings,
        router: ConversationRouter,
        commands: Commands,
        can_approve: ApprovalCheck,
        *,
        sync_commands: bool = True,
    ) -> None:
        if settings.support_channel_id is None:
            raise ValueError("DISCORD_SUPPORT_CHANNEL_ID is not set")
        intents = discord.Intents.none()
        intents.guilds = True  # channels and threads, to know a thread's parent
        intents.guild_messages = True
        # Privileged: without it Discord sends every message with empty content, and the agent
        # could not read the customer's answers. Switched on in the Developer Portal.
        intents.message_content = True
        super().__init__(intents=intents, allowed_mentions=NO_PINGS)
        self.settings = settings
        self.support_channel_id: int = settings.support_channel_id
        self.router = router
        self.commands = commands
        self.can_approve = can_approve
        self.response_budget = RESPONSE_BUDGET
        self._sync_commands = sync_commands
        self._channel_locks: weakref.WeakValueDictionary[int, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._api_url = settings.api_url
        if self._api_url is not None:
            routed = RoutedHTTPClient(
                self.http.loop, base_url=self._api_url, max_ratelimit_timeout=None
            )
            self.http = routed
            self._connection.http = routed
        # Built after the HTTP client is final: the tree keeps a reference to it.
        self.tree = app_commands.CommandTree(self)
        self.tree.error(self._on_app_command_error)
        manifest = load_manifest()
        for command in _build_commands(self, manifest):
            self.tree.add_command(command)
        problems = mismatches(self.tree, manifest)
        if problems:
            raise RuntimeError("Discord commands differ from the manifest: " + "; ".join(problems))

    # -- lifecycle ----------------------------------------------------------------------------

    async def login(self, token: str) -> None:
        if self._api_url is not None:
            async_context.set(_RoutedWebhookAdapter(self._api_url))
        await super().login(token)

    async def setup_hook(self) -> None:
        # Registered as classes, not views: a click on any message with a matching custom id is
        # handled, whoever posted it and however long ago.
        self.add_dynamic_items(DecisionButton)
        if self._sync_commands:
            await self._register_commands()

    async def _register_commands(self) -> None:
        guild_id = self.settings.guild_id
        assert self.application_id is not None  # set by login before setup_hook
        try:
            names = await register_commands(self.http, self.application_id, guild_id)
        except discord.HTTPException as err:
            # Not fatal: the conversations work without commands. 50001 Missing Access usually
            # means the bot was invited without the applications.commands scope.
            log.error(
                "could not register Discord commands (%s %s, code %s); invite the bot with the "
                "applications.commands scope and run `refund-bot discord sync-commands`",
                err.status,
                err.text,
                err.code,
            )
            return
        where = f"guild {guild_id}" if guild_id else "globally (may take up to an hour)"
        log.info("Discord commands registered %s: %s", where, ", ".join(names))

    async def on_ready(self) -> None:
        log.info("Discord: logged in as %s in %d guild(s)", self.user, len(self.guilds))
        if self.get_channel(self.support_channel_id) is None:
            log.warning(
                "Discord: support channel %s is not visible to the bot; check "
                "DISCORD_SUPPORT_CHANNEL_ID and the bot's View Channel permission",
                self.support_channel_id,
            )

    # -- customer messages --------------------------------------------------------------------

    async def on_message(self, message: discord.Message) -> None:
        if not self._from_a_person(message):
            return
        # discord.py runs each event in its own task; one thread's messages are routed one at a
        # time, in the order they arrived, so the conversation receives them in that order. Each
        # opening message is a conversation of its own and waits for no other.
        opening = message.channel.id == self.support_channel_id
        async with self._ordered(message.id if opening else message.channel.id):
            await self._route_message(message)

    def _ordered(self, channel_id: int) -> asyncio.Lock:
        # Weak values: a lock lives while a task holds or awaits it, then goes.
        lock = self._channel_locks.get(channel_id)
        if lock is None:
            lock = asyncio.Lock()
            self._channel_locks[channel_id] = lock
        return lock

    async def _route_message(self, message: discord.Message) -> None:
        assert message.guild is not None
        thread: MaybeThread | None
        if message.channel.id == self.support_channel_id:
            thread = await self._open_thread(message)
            if thread is None:
                return
            opens_thread = True
        elif isinstance(message.channel, MaybeThread) and (
            await self._parent_of(message.channel) == self.support_channel_id
        ):
            thread = message.channel
            opens_thread = False
        else:
            return  # another channel, or a thread elsewhere

        inbound = InboundMessage(
            event_id=str(message.id),
            thread=ThreadRef(
                platform="discord",
                workspace=str(message.guild.id),
                channel=str(self.support_channel_id),
                thread=str(thread.id),
            ),
            message_id=str(message.id),
            author=actor_for(message.author),
            # Cut at the edge too: Nitro members may send 4000 characters; nothing longer than
            # the router would keep is held here, logged or queued.
            text=cut(message.content),
            opens_thread=opens_thread,
        )
        try:
            routed = await self.router.on_message(inbound)
        except Exception:
            log.exception("could not route Discord message %s", message.id)
            await _say(thread, SORRY_NOT_PASSED_ON)
            return
        notice = NOTICES.get(routed)
        if notice is not None:
            await _say(thread, notice)

    def _from_a_person(self, message: discord.Message) -> bool:
        if message.guild is None or message.webhook_id is not None:
            return False
        if message.author.bot or (self.user is not None and message.author.id == self.user.id):
            return False
        # Joins, pins, thread-created notices and other system messages are not anyone's words.
        return message.type in HUMAN_MESSAGE_TYPES

    async def _open_thread(self, message: discord.Message) -> MaybeThread | None:
        assert message.guild is not None
        name = fit_content(f"Refund request from {message.author.display_name}", 100)
        try:
            return await message.create_thread(
                name=name, auto_archive_duration=THREAD_ARCHIVE_MINUTES
            )
        except discord.HTTPException as err:
            if err.code == THREAD_ALREADY_EXISTS:
                # Another replica got there first. A thread on a message has the message's id,
                # and the router's signal-with-start makes the second start a no-op.
                return self.get_partial_messageable(
                    message.id, guild_id=message.guild.id, type=discord.ChannelType.public_thread
                )
            log.error(
                "could not open a thread on message %s in the support channel (%s %s); the bot "
                "needs Create Public Threads and Send Messages in Threads there",
                message.id,
                err.status,
                err.text,
            )
            return None

    async def _parent_of(self, channel: MaybeThread) -> int | None:
        if isinstance(channel, discord.Thread):
            return channel.parent_id
        if isinstance(channel, discord.PartialMessageable):
            # A channel the cache does not know (rare: GUILD_CREATE lists active threads and
            # THREAD_CREATE adds new ones). Ask Discord what it is.
            try:
                fetched = await self.fetch_channel(channel.id)
            except discord.HTTPException:
                log.warning("could not look up channel %s", channel.id, exc_info=True)
                return None
            return fetched.parent_id if isinstance(fetched, discord.Thread) else None
        return None

    # -- Approve / Deny -----------------------------------------------------------------------

    async def on_decision(
        self, interaction: discord.Interaction, action: Action, workflow_id: str
    ) -> None:
        actor = actor_for(interaction.user)
        check = asyncio.ensure_future(self._may_decide(actor))
        done, _ = await asyncio.wait({check}, timeout=self.response_budget)
        if not done:
            await interaction.response.defer()  # DEFERRED_UPDATE_MESSAGE: no visible change
        allowed = await check
        if not allowed:
            text = self._refusal(actor) if allowed is False else FAILED
            await _tell_privately(interaction, text)
            return

        original = interaction.message.content if interaction.message else ""
        verb = "Approved" if action == "approve" else "Denied"
        # No view: the buttons go, so nobody presses them twice.
        await _edit_clicked_message(
            interaction, _append(original, f"{verb} by {actor.label}, checking authorization.")
        )
        click = InboundClick(
            event_id=str(interaction.id),
            workflow_id=workflow_id,
            decision=action,
            actor=actor,
            click_id=str(interaction.id),
        )
        try:
            routed = await self.router.on_click(click)
        except Exception:
            log.exception("could not route the %s click on %s", action, workflow_id)
            # Put the buttons back so that someone can try again.
            await _edit_clicked_message(
                interaction, original, restore=(workflow_id, ["approve", "deny"])
            )
            await _tell_privately(interaction, FAILED)
            return
        notice = CLICK_NOTICES.get(routed)
        if notice is not None:
            if routed in (Routed.CLOSED, Routed.UNKNOWN):
                await _edit_clicked_message(
                    interaction, _append(original, f"{verb} by {actor.label}: {notice}")
                )
            await _tell_privately(interaction, notice)

    async def _may_decide(self, actor: Actor) -> bool | None:
        """True or False from the live pre-check, None when it could not be made."""
        try:
            return await self.can_approve(actor)
        except Exception:
            log.exception("could not check whether %s may approve", actor.user_id)
            return None

    def _refusal(self, actor: Actor) -> str:
        role = (self.settings.approver_role or "").strip()
        # A role id renders as the role's name in a mention; AllowedMentions.none() keeps it quiet.
        shown = f"<@&{role}>" if role.isdigit() else role
        needed = f"the Discord role {shown}" if role else "the refund_approver role"
        return (
            f"Sorry {actor.label}, approving or denying a refund needs {needed}, and you don't "
            "hold it. Nothing changed."
        )

    # -- application commands -----------------------------------------------------------------

    async def answer(
        self,
        interaction: discord.Interaction,
        work: Callable[[], Awaitable[CommandReply]],
        *,
        defer: bool,
    ) -> None:
        """Run a command and show its reply to the caller only. `defer`: known to be slow."""
        if defer:
            await interaction.response.defer(ephemeral=True, thinking=True)
        task = asyncio.ensure_future(work())
        if not defer:
            done, _ = await asyncio.wait({task}, timeout=self.response_budget)
            if not done:
                await interaction.response.defer(ephemeral=True, thinking=True)
        try:
            reply = await task
        except Exception:
            name = interaction.command.name if interaction.command else "command"
            log.exception("/%s failed", name)
            reply = CommandReply(ok=False, text=FAILED)
        await _tell_privately(interaction, reply.text)

    async def answer_for_conversation(
        self,
        interaction: discord.Interaction,
        given: str | None,
        work: Callable[[Actor, str], Awaitable[CommandReply]],
        *,
        defer: bool,
    ) -> None:
        workflow_id = self.conversation_for(interaction, given)
        if workflow_id is None:
            await _tell_privately(interaction, WHICH_CONVERSATION)
            return
        actor = actor_for(interaction.user)
        await self.answer(interaction, lambda: work(actor, workflow_id), defer=defer)

    def conversation_for(self, interaction: discord.Interaction, given: str | None) -> str | None:
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
                on_opening = message is not None and int(channel) == self.support_channel_id
                return self._workflow_id(link_guild, message if on_opening else channel)
            if text.isdigit() and guild:
                return self._workflow_id(guild, text)
            return text  # a Workflow ID
        channel = interaction.channel
        if isinstance(channel, discord.Thread) and guild:
            return self._workflow_id(guild, str(channel.id))
        return None

    def _workflow_id(self, guild: str, thread: str) -> str:
        return workflow_id_for(
            ThreadRef(
                platform="discord",
                workspace=guild,
                channel=str(self.support_channel_id),
                thread=thread,
            )
        )

    async def _on_app_command_error(
        self, interaction: discord.Interaction, error: app_commands.AppCommandError
    ) -> None:
        # CommandNotFound / CommandSignatureMismatch: Discord holds definitions other than the
        # manifest's (run sync-commands). Anything else is a bug; either way the caller hears.
        log.error("Discord command failed: %s", error, exc_info=error)
        text = FAILED
        if isinstance(error, app_commands.CommandNotFound | app_commands.CommandSignatureMismatch):
            text = "This command is out of date here; run `refund-bot discord sync-commands`."
        try:
            await _tell_privately(interaction, text)
        except discord.HTTPException:
            log.warning("could not tell the caller", exc_info=True)


def _build_commands(
    client: RefundBotClient, manifest: tuple[dict[str, Any], ...]
) -> list[app_commands.Command[Any, ..., None]]:
    """The handlers; names, descriptions and choices come from the manifest."""

    async def crash_worker(interaction: discord.Interaction) -> None:
        actor = actor_for(interaction.user)
        await client.answer(interaction, lambda: client.commands.crash_worker(actor), defer=True)

    async def refund_status(
        interaction: discord.Interaction, conversation: str | None = None
    ) -> None:
        await client.answer_for_conversation(
            interaction, conversation, client.commands.refund_status, defer=True
        )

    async def refund_release(
        interaction: discord.Interaction, conversation: str | None = None
    ) -> None:
        await client.answer_for_conversation(
            interaction, conversation, client.commands.refund_release, defer=False
        )

    async def refund_hold(interaction: discord.Interaction, state: str | None = None) -> None:
        actor = actor_for(interaction.user)
        enabled = None if state is None else state == "on"
        await client.answer(
            interaction, lambda: client.commands.refund_hold(actor, enabled), defer=False
        )

    async def refund_grant(
        interaction: discord.Interaction, user: discord.User, role: str, limit: str | None = None
    ) -> None:
        actor, target = actor_for(interaction.user), actor_for(user)
        await client.answer(
            interaction,
            lambda: client.commands.refund_grant(actor, target, role, limit),
            defer=False,
        )

    async def refund_revoke(
        interaction: discord.Interaction, user: discord.User, role: str
    ) -> None:
        actor, target = actor_for(interaction.user), actor_for(user)
        await client.answer(
            interaction, lambda: client.commands.refund_revoke(actor, target, role), defer=False
        )

    handlers: dict[str, Callable[..., Awaitable[None]]] = {
        "crash-worker": crash_worker,
        "refund-status": refund_status,
        "refund-release": refund_release,
        "refund-hold": refund_hold,
        "refund-grant": refund_grant,
        "refund-revoke": refund_revoke,
    }
    return [_command(command_spec(name, manifest), handler) for name, handler in handlers.items()]


def _command(
    spec: dict[str, Any], callback: Callable[..., Awaitable[None]]
) -> app_commands.Command[Any, ..., None]:
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
    command: app_commands.Command[Any, ..., None] = app_commands.Command(
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


# -- answering --------------------------------------------------------------------------------


def _append(original: str, line: str) -> str:
    return fit_content(f"{original}\n\n{line}" if original else line)


async def _say(channel: discord.abc.Messageable, text: str) -> None:
    try:
        await channel.send(text, allowed_mentions=NO_PINGS)
    except discord.HTTPException:
        log.warning(
            "could not post a notice in channel %s", getattr(channel, "id", "?"), exc_info=True
        )


async def _tell_privately(interaction: discord.Interaction, text: str) -> None:
    text = fit_content(text)
    if interaction.response.is_done():
        await interaction.followup.send(text, ephemeral=True, allowed_mentions=NO_PINGS)
    else:
        await interaction.response.send_message(text, ephemeral=True, allowed_mentions=NO_PINGS)


async def _edit_clicked_message(
    interaction: discord.Interaction,
    content: str,
    *,
    restore: tuple[str, list[Action]] | None = None,
) -> None:
    view: discord.ui.View | None = None
    if restore is not None:
        workflow_id, actions = restore
        view = discord.ui.View(timeout=None)
        for action in actions:
            view.add_item(DecisionButton.for_action(action, workflow_id))
    if interaction.response.is_done():
        await interaction.edit_original_response(
            content=content, view=view, allowed_mentions=NO_PINGS
        )
    else:
        # UPDATE_MESSAGE: the answer to the click is the edit itself.
        await interaction.response.edit_message(
            content=content, view=view, allowed_mentions=NO_PINGS
        )


# -- entry points -----------------------------------------------------------------------------


def build_client(
    settings: DiscordSettings,
    router: ConversationRouter,
    commands: Commands,
    *,
    grants: GrantSource | None = None,
    can_approve: ApprovalCheck | None = None,
    sync_commands: bool = True,
) -> RefundBotClient:
    """The Discord client, its handlers, buttons and commands. Run it with `serve`.

    `grants` is the live grant source the Worker's authorize_refund uses for Discord users (a
    DiscordRoleGrants, or the GrantStore itself); the click pre-check reads it. `can_approve`
    replaces that pre-check outright (tests). `sync_commands`: register the manifest's commands
    at login (DISCORD_GUILD_ID: that guild, at once; otherwise globally).
    """
    if settings.token is None:
        raise ValueError("DISCORD_TOKEN is not set: Discord is not configured")
    if can_approve is None:
        if grants is None:
            raise ValueError("build_client needs `grants` (the live grant source) or `can_approve`")
        can_approve = approver_check(grants)
    return RefundBotClient(settings, router, commands, can_approve, sync_commands=sync_commands)


async def serve(client: discord.Client, settings: DiscordSettings) -> None:
    """Log in, connect to the gateway and handle events until cancelled; then close."""
    if settings.token is None:
        raise ValueError("DISCORD_TOKEN is not set: Discord is not configured")
    try:
        await client.start(settings.token.get_secret_value())
    except discord.PrivilegedIntentsRequired:
        log.error(
            "Discord refused the Message Content intent. Switch it on: Developer Portal > your "
            "application > Bot > Privileged Gateway Intents > Message Content Intent "
            "(docs/discord.md explains why the agent needs it)."
        )
        raise
    finally:
        if not client.is_closed():
            await client.close()

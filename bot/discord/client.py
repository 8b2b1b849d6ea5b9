"""The Discord gateway client: its set-up, its gateway events, and the entry points to run it.

    gateway event -> edge (MESSAGE_CREATE, INTERACTION_CREATE checked; kept if unreadable)
    customer message in the support channel or a thread -> customer_messages -> the router
                                                           (an opening through openings)
    Approve / Deny click (DecisionButton)               -> buttons -> bot.clicks -> router.on_click
    /crash-worker, /refund-… commands                   -> slash_commands    -> bot.commands

The handlers get the few parts they use (bot.discord.parts.BotParts), not this client. This
module owns the client: its intents, the REST and gateway addresses (`api_url`, `gateway_url`),
registering buttons and commands at start, each thread's order, `build_client` and `serve`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import discord
import yarl
from discord.gateway import DiscordWebSocket, ReconnectWebSocket
from discord.http import Route
from discord.utils import MISSING
from discord.webhook.async_ import AsyncWebhookAdapter, async_context

from agent import tracing
from agent.activities.authorize import GrantSource
from bot.clicks import ApprovalCheck, approver_check
from bot.commands import ChatCommands
from bot.conversations import WaitingRouter
from bot.discord.buttons import DecisionButton
from bot.discord.commands_spec import load_manifest, mismatches, register_commands
from bot.discord.customer_messages import is_from_a_person, route_customer_message
from bot.discord.edge import CheckedCommandTree, guard_parsers
from bot.discord.openings import OpeningRetry, ThreadOpenings
from bot.discord.outbound import RoutedHTTPClient
from bot.discord.parts import BotParts
from bot.discord.replies import NO_PINGS
from bot.discord.settings import DiscordSettings
from bot.discord.slash_commands import build_commands, on_command_error
from bot.keyed_locks import KeyedLocks
from bot.platform_health import PlatformHealth
from bot.reconnect import DEFAULT_BACKOFF, Backoff, ConnectionLost, Refused, keep_connected

log = logging.getLogger(__name__)

# How long one gateway handshake (connect, HELLO, IDENTIFY or RESUME) may take: discord.py's own.
HANDSHAKE_TIMEOUT = 60.0

# Gateway close codes no reconnect can mend (Discord's documentation names each): what to fix.
REFUSED_CLOSE_CODES = {
    4004: "Discord refused DISCORD_TOKEN at the gateway (4004 Authentication failed): "
    "reset the bot token in the Developer Portal and set it again",
    4010: "Discord refused the shard (4010 Invalid shard)",
    4011: "Discord requires sharding for this bot (4011 Sharding required)",
    4012: "Discord refused the gateway version (4012 Invalid API version)",
    4013: "Discord refused the intents (4013 Invalid intent(s))",
    4014: "Discord refused the Message Content intent (4014 Disallowed intent(s)): switch it on "
    "in the Developer Portal > your application > Bot > Privileged Gateway Intents > Message "
    "Content Intent (docs/discord.md explains why the agent needs it)",
}


class RefundBotClient(discord.Client):
    """The gateway client; its handlers get `parts` (buttons through interaction.client)."""

    def __init__(
        self,
        settings: DiscordSettings,
        router: WaitingRouter,
        commands: ChatCommands,
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
        # discord.py warns at every start that voice is unsupported (PyNaCl, davey): this bot uses
        # no voice, and an operator should not read a warning about it.
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
        super().__init__(intents=intents, allowed_mentions=NO_PINGS)
        self.settings = settings
        self.support_channel_id: int = settings.support_channel_id
        self.parts = BotParts(router, commands, settings, settings.support_channel_id, can_approve)
        # Before any event: what refund-bot reads of a message or an interaction is checked
        # before discord.py parses it, and one that does not fit is kept (bot.discord.edge).
        guard_parsers(self._connection.parsers, router)
        self._sync_commands = sync_commands
        self._in_arrival_order = KeyedLocks()
        # The openings whose thread this client opens: its own, and those the inbox still held
        # when it logged in (resumed by setup_hook).
        self.openings = ThreadOpenings(
            self, router, self._in_arrival_order, OpeningRetry.from_settings(settings)
        )
        self._resuming: asyncio.Task[None] | None = None
        # What the gateway last did; serve() and on_ready() keep it current.
        self.health = PlatformHealth("discord")
        self.logged_in = False  # login (REST, then setup_hook) has completed once
        if settings.api_url is not None:
            routed = RoutedHTTPClient(
                self.http.loop, base_url=settings.api_url, max_ratelimit_timeout=None
            )
            self.http = routed
            self._connection.http = routed
        # Built after the HTTP client is final: the tree keeps a reference to it.
        self.tree = CheckedCommandTree(self)
        self.tree.error(on_command_error)
        manifest = load_manifest()
        for command in build_commands(self.parts, manifest):
            self.tree.add_command(command)
        problems = mismatches(self.tree, manifest)
        if problems:
            raise RuntimeError("Discord commands differ from the manifest: " + "; ".join(problems))

    # -- lifecycle ----------------------------------------------------------------------------

    async def login(self, token: str) -> None:
        """Log in; with `api_url`, interaction responses go there too. discord.py sends them with
        its webhook adapter, taken from the `async_context` ContextVar: set here, in the calling
        task's context, every event task inherits it, and nothing process-wide changes."""
        if self.settings.api_url is not None:
            async_context.set(_RoutedWebhookAdapter(self.settings.api_url))
        await super().login(token)
        self.logged_in = True

    async def connect(self, *, reconnect: bool = True) -> None:
        """Connect to the gateway and handle events until the connection fails; then raise.

        A RECONNECT or INVALID_SESSION from Discord, or a close it allows resuming, is followed at
        once (RESUME, or IDENTIFY for a new session) as long as the connection made progress; any
        other failure is raised to keep_connected, whose next call resumes the session.
        `reconnect` is ignored: retrying is keep_connected's.

        This replaces discord.py's Client.connect, which always opens a new session at the class
        constant DiscordWebSocket.DEFAULT_GATEWAY, retries failures itself with a traceback each
        time and waits of up to 17 minutes, and raises AttributeError when the very first
        connection fails. Here every connection goes to `gateway_url` when it is set.
        """
        while not self.is_closed():
            params = self._next_connection()
            before = highest = params.get("sequence") or 0  # the last event seen, by number
            try:
                handshake = DiscordWebSocket.from_client(self, **params)
                self.ws = await asyncio.wait_for(handshake, timeout=HANDSHAKE_TIMEOUT)
                while True:
                    await self.ws.poll_event()
                    highest = max(highest, self.ws.sequence or 0)
            except ReconnectWebSocket as asked:
                self.dispatch("disconnect")
                if highest == before:
                    # Not one event on this connection: following at once could loop hot (and
                    # Discord wants a pause before a new IDENTIFY after an invalidated session).
                    raise ConnectionLost(
                        f"the gateway asked to {asked.op} before any event"
                    ) from None
                # An invalidated session has no session id any more: the next one IDENTIFYs.
                log.debug("Discord asked to %s the gateway connection", asked.op)
            except BaseException:
                if self.ws is not None:
                    await self.ws.close(code=4000)  # stops its heartbeat thread; resumable
                raise

    async def close(self) -> None:
        # discord.py leaves its wait for the guilds after READY running past close(); when that
        # wait ends it dispatches `ready` into a closed client, and a traceback is logged.
        ready = getattr(self._connection, "_ready_task", None)
        if ready is not None:
            ready.cancel()
        if self._resuming is not None:
            self._resuming.cancel()
        await self.openings.close()
        await super().close()

    def _next_connection(self) -> dict[str, Any]:
        """DiscordWebSocket.from_client's arguments: RESUME the last session while it has an id
        (discord.py's rule too: always try to), IDENTIFY otherwise; to `gateway_url` when set,
        whatever Discord said."""
        configured = yarl.URL(self.settings.gateway_url) if self.settings.gateway_url else None
        ws = self.ws
        if ws is not None and ws.session_id is not None:
            return {
                "initial": False,
                "shard_id": self.shard_id,
                "resume": True,
                "session": ws.session_id,
                "sequence": ws.sequence,
                "gateway": configured or ws.gateway,  # READY's resume_gateway_url
            }
        # None: discord.py's DEFAULT_GATEWAY.
        return {"initial": ws is None, "shard_id": self.shard_id, "gateway": configured}

    async def setup_hook(self) -> None:
        # Registered as classes, not views: a click on any message with a matching custom id is
        # handled, whoever posted it and however long ago.
        self.add_dynamic_items(DecisionButton)
        # Over REST, which needs no gateway: what a killed or replaced bot was opening.
        self._resuming = asyncio.create_task(self.openings.resume(), name="resume openings")
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

    # -- gateway events -----------------------------------------------------------------------

    async def on_ready(self) -> None:
        log.info("Discord: logged in as %s in %d guild(s)", self.user, len(self.guilds))
        self.health.connected()
        if self.get_channel(self.support_channel_id) is None:
            log.warning(
                "Discord: support channel %s is not visible to the bot; check "
                "DISCORD_SUPPORT_CHANNEL_ID and the bot's View Channel permission",
                self.support_channel_id,
            )

    async def on_resumed(self) -> None:
        log.info("Discord: gateway session resumed")
        self.health.connected()

    async def on_message(self, message: discord.Message) -> None:
        if not is_from_a_person(message, self.user):
            return
        # discord.py runs each event in its own task; one thread's messages are routed one at a
        # time, in the order they arrived, so the conversation receives them in that order. Each
        # opening message is a conversation of its own and waits for no other.
        opening = message.channel.id == self.support_channel_id
        with tracing.span(
            "discord.message", "consumer", platform="discord", event_id=str(message.id)
        ):
            async with self._in_arrival_order.hold(message.id if opening else message.channel.id):
                await route_customer_message(self.parts, self, self.openings, message)


class _RoutedWebhookAdapter(AsyncWebhookAdapter):
    """discord.py's webhook adapter (interaction responses, followups), sent to `base_url`."""

    def __init__(self, base_url: str) -> None:
        super().__init__()
        self._base_url = base_url

    async def request(self, route: Route, *args: Any, **kwargs: Any) -> Any:
        if route.url.startswith(Route.BASE):
            route.url = self._base_url + route.url[len(Route.BASE) :]
        return await super().request(route, *args, **kwargs)


# -- entry points -----------------------------------------------------------------------------


def build_client(
    settings: DiscordSettings,
    router: WaitingRouter,
    commands: ChatCommands,
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


async def serve(
    client: RefundBotClient,
    settings: DiscordSettings,
    health: PlatformHealth | None = None,
    *,
    backoff: Backoff = DEFAULT_BACKOFF,
) -> None:
    """Keep the client logged in and connected to the gateway until cancelled; then close it.

    Never raises into the stack: a failure is one line and a retry with capped backoff; a token or
    intent Discord refuses is one line and Discord shown down (`health`) until a restart.
    """
    if settings.token is None:
        raise ValueError("DISCORD_TOKEN is not set: Discord is not configured")
    token = settings.token.get_secret_value()
    if health is not None:
        client.health = health

    async def log_in_and_connect() -> None:
        if not client.logged_in:
            await _log_in(client, token)
        try:
            await client.connect()
        except discord.ConnectionClosed as closed:
            if closed.code in REFUSED_CLOSE_CODES:
                raise Refused(REFUSED_CLOSE_CODES[closed.code]) from None
            raise

    try:
        await keep_connected(client.health, log_in_and_connect, backoff=backoff)
    finally:
        if not client.is_closed():
            await client.close()
        client.health.stopped()


async def _log_in(client: RefundBotClient, token: str) -> None:
    try:
        await client.login(token)
    except discord.LoginFailure:
        await client.http.close()
        raise Refused(
            "Discord refused DISCORD_TOKEN (401 Unauthorized on login): copy the bot token from "
            "the Developer Portal > your application > Bot, set DISCORD_TOKEN and restart"
        ) from None
    except BaseException:
        # The next attempt's login opens a new HTTP session, on a new connector: closing the
        # session closed the one it had.
        await client.http.close()
        client.http.connector = MISSING
        raise

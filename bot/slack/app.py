"""The Slack inbound half: a slack-bolt AsyncApp for the support channel, its buttons and commands.

    customer message -> bot.slack.events -> router.keep (committed) -> ack -> router.deliver
    Approve / Deny   -> bot.slack.actions -> bot.clicks -> router.on_click -> `approval` Signal
    /refund-… command or message shortcut -> bot.slack.commands -> Commands -> ephemeral answer

This module builds the app and serves it, over HTTP or Socket Mode (`serve`). Every request is
acknowledged before any slow work; a customer's message is committed to the inbox first, and is
the only thing that is.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import http_edge
from agent.activities.authorize import GrantSource
from bot.commands import ChatCommands
from bot.conversations import Router
from bot.platform_health import PlatformHealth
from bot.reconnect import (
    DEFAULT_BACKOFF,
    Backoff,
    ConnectionLost,
    Refused,
    keep_connected,
    one_line,
)
from bot.slack.actions import DECISION_ACTIONS, register_decision_actions
from bot.slack.commands import COMMANDS, SHORTCUTS, register_commands
from bot.slack.events import inbound_message, register_message_events
from bot.slack.identity import OwnIdentity
from bot.slack.links import FindByOrder
from bot.slack.requests import (
    BlockActions,
    Checked,
    CheckedSocketModeHandler,
    MalformedRequest,
    MessageEventCallback,
    MessageShortcut,
    SlackRequest,
    SlashCommand,
    UrlVerification,
    bolt_context,
    bolt_request,
    parse_body,
    read_request,
    signature_valid,
)
from bot.slack.settings import SlackSettings
from bot.slack.web_client import KeptAliveWebClient

log = logging.getLogger(__name__)

# HTTP mode's one endpoint: events, interactivity and every command (the manifests point here).
EVENTS_PATH = "/slack/events"
# Socket Mode: how often the connection is pinged and checked (the SDK's default for Bolt).
PING_INTERVAL = 10.0
# How long opening the Socket Mode websocket may take before the attempt counts as failed.
CONNECT_TIMEOUT = 30.0
# Slack's `error` codes for a token it will not accept, whatever the retry.
TOKEN_REFUSED = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "not_allowed_token_type",
        "no_permission",
        "missing_scope",
    }
)
# The SDK's Socket Mode logger: its failures are one line here, as every platform failure is.
_SOCKET_MODE_LOG = logging.getLogger(__name__ + ".socket_mode")


class SlackApp(AsyncApp):
    """The bolt app, the router its edges write customer messages ahead to (and hand what they
    cannot read), the support channel those messages come from, and who the bot is there (its
    own messages are dropped at the edge)."""

    router: Router
    support_channel: str
    identity: OwnIdentity


def build_app(
    settings: SlackSettings,
    router: Router,
    commands: ChatCommands,
    *,
    client: AsyncWebClient | None = None,
    find_by_order: FindByOrder | None = None,
    grants: GrantSource | None = None,
) -> SlackApp:
    """The bolt app with every listener registered; run it with `serve` (or `http_web_app`).

    `find_by_order(team_id, order_number)` lets /refund-status and /refund-release take an order
    number (bot.slack.links.order_finder(temporal_client) is the default implementation); without
    it they take a thread link or a Workflow ID only.

    `grants` is the live grant source the Worker's authorize_refund uses for Slack users (a
    SlackUserGroupGrants, or the GrantStore itself). With it, an Approve / Deny click from someone
    who may not decide is refused privately and leaves the buttons in place; without it every
    click goes to the Workflow, whose authorization check says the result in the thread.
    """
    if settings.bot_token is None and client is None:
        raise ValueError("SLACK_BOT_TOKEN is not set; the Slack app cannot be built")
    if settings.app_token is None and settings.signing_secret is None:
        # Bolt would otherwise verify HTTP requests against an empty secret, which anyone can sign.
        raise ValueError("HTTP mode needs SLACK_SIGNING_SECRET (or set SLACK_APP_TOKEN)")
    if not settings.support_channel:
        raise ValueError("SLACK_SUPPORT_CHANNEL (a channel id) is not set")

    if client is None:
        assert settings.bot_token is not None
        # Kept alive, and shared by bolt's per-request clients: closed when `serve` ends.
        client = KeptAliveWebClient(
            token=settings.bot_token.get_secret_value(), base_url=settings.api_url
        )
    secret = settings.signing_secret.get_secret_value() if settings.signing_secret else ""
    app = SlackApp(
        name="refund-bot",
        client=client,
        signing_secret=secret,
        request_verification_enabled=True,
        process_before_response=False,  # listeners run after the ack, never before it
    )
    identity = OwnIdentity(client)
    register_message_events(app, router, settings.support_channel, identity)
    register_decision_actions(app, router, grants)
    register_commands(app, commands, find_by_order)
    app.router = router
    app.support_channel = settings.support_channel
    app.identity = identity
    return app


async def kept_ahead(app: SlackApp, request: SlackRequest) -> bool:
    """Write a customer's message ahead to the inbox, before Slack hears "ok" (its listener then
    delivers it): False when it could not be kept, and must not be acknowledged, so that Slack
    sends it again. Anything else needs no keeping, the bot's own messages included."""
    if not isinstance(request, MessageEventCallback):
        return True
    try:
        # Known since `serve` started; asked of Slack here only when served another way.
        me = await app.identity.get()
    except Exception as err:
        log.warning(
            "slack: event %s not acknowledged: who the bot is is unknown (auth.test: %s); "
            "Slack sends it again",
            request.event_id,
            one_line(err),
        )
        return False
    inbound = inbound_message(request, app.support_channel, me)
    if inbound is None:
        return True
    try:
        await app.router.keep(inbound)
    except Exception as err:
        log.warning(
            "slack: event %s could not be kept (%s); not acknowledged, Slack sends it again",
            inbound.event_id,
            one_line(err),
        )
        return False
    return True


async def checked_request(request: web.Request, signing_secret: str) -> Checked | web.Response:
    """The request, if Slack signed it and shaped it as Slack sends; otherwise the answer to
    give: 401 for a bad signature (checked before parsing), 400."""
    # A body that does not decode is a 400 before the signature: the bytes signed are the
    # decoded ones, and these never decode.
    raw = await http_edge.read_body(request, "slack")
    if not signature_valid(signing_secret, raw, request.headers):
        return web.json_response({"error": "invalid request"}, status=401)
    try:
        body = parse_body(raw, request.content_type)
        typed = read_request(body)
        # Built here only for what bolt will see; the rest never reaches it.
        context = bolt_context(typed, body) if handled(typed) else None
    except MalformedRequest as err:
        log.warning("slack: refused a signed but malformed request: %s", err)
        return web.json_response({"error": "malformed request"}, status=400)
    return Checked(raw, body, typed, context)


def http_web_app(app: SlackApp, signing_secret: str) -> web.Application:
    """An aiohttp application serving POST /slack/events (Events API, interactivity, commands).

        POST -> signature (401) -> shape (400) -> kept ahead (503) -> bolt -> its ack (200)

    The signature is checked before the body is parsed, the body's shape before bolt sees it
    (bot.slack.requests). A request refund-bot handles (`handled`) goes to bolt, whose answer is
    Slack's: bolt acks a message event before its listener runs, and every other listener acks
    first. URL verification gets its challenge; anything else an empty 200 and nothing more,
    since Slack retries a request answered otherwise.
    """

    async def events(request: web.Request) -> web.Response:
        checked = await checked_request(request, signing_secret)
        if isinstance(checked, web.Response):
            return checked
        if isinstance(checked.request, UrlVerification):
            return web.json_response({"challenge": checked.request.challenge})
        if checked.context is None:
            log.debug("slack: ignored %s", checked.request)
            return web.Response()  # acknowledged, so that Slack does not send it again
        if not await kept_ahead(app, checked.request):
            return web.Response(status=503)  # not kept: Slack retries what it got no 200 for
        bolt = bolt_request(checked, request.query_string, request.headers)
        return await to_aiohttp_response(await app.async_dispatch(bolt))

    web_app = web.Application()
    web_app.router.add_post(EVENTS_PATH, events)
    return web_app


def handled(request: SlackRequest) -> bool:
    """Whether the app has a listener for this (typed) request, whose ack is an empty 200
    whatever bolt does next: a message event (bolt acks events before their listener), one of
    our buttons, commands or shortcuts (each listener's first line is `ack()`)."""
    match request:
        case MessageEventCallback():
            return True
        case BlockActions():
            return request.actions[0].action_id in DECISION_ACTIONS
        case MessageShortcut():
            return request.callback_id in SHORTCUTS
        case SlashCommand():
            return request.command in COMMANDS
    return False


async def serve(
    app: SlackApp,
    settings: SlackSettings,
    health: PlatformHealth | None = None,
    *,
    backoff: Backoff = DEFAULT_BACKOFF,
    ping_interval: float = PING_INTERVAL,
) -> None:
    """Serve Slack until cancelled: Socket Mode with SLACK_APP_TOKEN, else HTTP on SLACK_PORT.

        auth.test -> Socket Mode: apps.connections.open -> websocket ... closed -> again
                  -> HTTP mode: listen on SLACK_PORT

    Never raises into the stack and keeps `health` current. A token Slack refuses, or a port that
    cannot be bound, is one line and Slack shown down; anything else is one line and a retry with
    capped backoff. Socket Mode's reconnecting is this loop's, not the SDK's: the SDK retries a
    failed connection every ping interval for ever, a traceback each time, and cannot tell a
    refused token from an outage. In Socket Mode bolt acks Events API envelopes itself before
    the listener runs (process_before_response stays False) and every other listener acks first.
    """
    health = health or PlatformHealth("slack")
    if settings.app_token is not None:
        token = settings.app_token.get_secret_value()
        connect = functools.partial(_socket_mode, app, token, health, ping_interval)
    else:
        assert settings.signing_secret is not None  # build_app refused HTTP mode without one
        secret = settings.signing_secret.get_secret_value()
        connect = functools.partial(_http_mode, app, settings.port, secret, health)
    try:
        await keep_connected(health, connect, backoff=backoff)
    finally:
        health.stopped()
        if isinstance(app.client, KeptAliveWebClient):
            await app.client.close()  # build_app's: bolt's per-request clients share it


async def _http_mode(app: SlackApp, port: int, signing_secret: str, health: PlatformHealth) -> None:
    await _check_bot_token(app)
    runner = http_edge.runner(http_web_app(app, signing_secret))
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, "0.0.0.0", port).start()
        except OSError as err:
            reason = os.strerror(err.errno) if err.errno else str(err)  # "Address already in use"
            raise Refused(
                f"cannot listen on port {port} ({reason}): free the port or set SLACK_PORT, "
                "then restart"
            ) from None
        log.info("slack: HTTP mode on :%d%s", port, EVENTS_PATH)
        health.connected()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


async def _socket_mode(
    app: SlackApp, app_token: str, health: PlatformHealth, ping_interval: float
) -> None:
    await _check_bot_token(app)
    try:
        opened = await app.client.apps_connections_open(app_token=app_token)
    except SlackApiError as err:
        error = err.response.get("error")
        if error in TOKEN_REFUSED:
            raise Refused(
                f"Slack refused SLACK_APP_TOKEN (apps.connections.open: {error}): create an "
                "app-level token with the connections:write scope (xapp-…) under Basic "
                "Information > App-Level Tokens, set SLACK_APP_TOKEN and restart"
            ) from None
        raise
    handler = CheckedSocketModeHandler(
        app,
        app_token,
        handles=handled,
        router=app.router,
        kept_ahead=functools.partial(kept_ahead, app),
        logger=_SOCKET_MODE_LOG,
        ping_interval=ping_interval,
    )
    client = handler.client
    client.default_auto_reconnect_enabled = client.auto_reconnect_enabled = False
    closed = asyncio.Event()

    async def on_close(_: object) -> None:
        closed.set()

    client.on_close_listeners.append(on_close)
    client.on_error_listeners.append(on_close)
    client.wss_uri = opened["url"]
    try:
        await asyncio.wait_for(handler.connect_async(), timeout=CONNECT_TIMEOUT)
        log.info("slack: Socket Mode connected")
        health.connected()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closed.wait(), timeout=ping_interval)
            closed.clear()
            if not await client.is_connected():
                # Slack's own "refresh" (a `disconnect` envelope) swaps connections in well
                # under a ping interval; only a connection still down after one is lost.
                await asyncio.sleep(ping_interval)
                if not await client.is_connected():
                    raise ConnectionLost("the Socket Mode connection closed")
    finally:
        await handler.close_async()


async def _check_bot_token(app: SlackApp) -> None:
    """auth.test: the token is good, and names the bot (its own messages are dropped by it)."""
    try:
        await app.identity.learn()
    except SlackApiError as err:
        error = err.response.get("error")
        if error in TOKEN_REFUSED:
            raise Refused(
                f"Slack refused SLACK_BOT_TOKEN (auth.test: {error}): copy the Bot User OAuth "
                "Token (xoxb-…) from your app's OAuth & Permissions page, set SLACK_BOT_TOKEN "
                "and restart"
            ) from None
        raise


class _OneLine(logging.Filter):
    """The Socket Mode SDK logs a traceback for each failed attempt; keep its one-line message."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True


_SOCKET_MODE_LOG.addFilter(_OneLine())

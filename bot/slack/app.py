"""The Slack inbound half: a slack-bolt AsyncApp for the support channel, its buttons and commands.

Every request is acknowledged before any slow work: Bolt acks Events API requests itself before
the listener runs (process_before_response stays False), and every other listener calls `ack()`
first. The router call, which may wait on Temporal, always happens after the HTTP 200 (or the
Socket Mode envelope ack) has gone back to Slack.

    customer message in the support channel -> ConversationRouter.on_message -> Signal(-with-start)
    Approve / Deny button                    -> ConversationRouter.on_click   -> `approval` Signal
    /refund-… commands, message shortcuts    -> Commands                      -> ephemeral answer

This module builds the app and runs it; the listeners live in bot.slack.events (messages),
bot.slack.actions (the buttons) and bot.slack.commands (commands and shortcuts).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from agent.activities.authorize import GrantSource
from bot.commands import Commands
from bot.conversations import ConversationRouter
from bot.platform_health import PlatformHealth
from bot.slack.actions import register_decision_actions
from bot.slack.commands import register_commands
from bot.slack.events import register_message_events
from bot.slack.links import FindByOrder
from bot.slack.requests import (
    CheckedSocketModeHandler,
    MalformedRequest,
    bolt_request,
    check_shape,
    parse_body,
    signature_valid,
)
from bot.slack.settings import SlackSettings

log = logging.getLogger(__name__)

# HTTP mode's one endpoint: events, interactivity and every command (the manifests point here).
EVENTS_PATH = "/slack/events"


def build_app(
    settings: SlackSettings,
    router: ConversationRouter,
    commands: Commands,
    *,
    client: AsyncWebClient | None = None,
    find_by_order: FindByOrder | None = None,
    grants: GrantSource | None = None,
) -> AsyncApp:
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
        client = AsyncWebClient(
            token=settings.bot_token.get_secret_value(), base_url=settings.api_url
        )
    secret = settings.signing_secret.get_secret_value() if settings.signing_secret else ""
    app = AsyncApp(
        name="refund-bot",
        client=client,
        signing_secret=secret,
        request_verification_enabled=True,
        process_before_response=False,  # listeners run after the ack, never before it
    )
    register_message_events(app, router, settings.support_channel)
    register_decision_actions(app, router, grants)
    register_commands(app, commands, find_by_order)
    return app


def http_web_app(app: AsyncApp, signing_secret: str) -> web.Application:
    """An aiohttp application serving POST /slack/events (Events API, interactivity, commands).

    The signature is checked before the body is parsed (401), the body's shape before bolt sees
    it (400): see bot.slack.requests.
    """

    async def events(request: web.Request) -> web.Response:
        raw = await request.read()
        if not signature_valid(signing_secret, raw, request.headers):
            return web.json_response({"error": "invalid request"}, status=401)
        try:
            body = parse_body(raw, request.content_type)
            check_shape(body)
        except MalformedRequest as err:
            log.warning("slack: refused a signed but malformed request: %s", err)
            return web.json_response({"error": "malformed request"}, status=400)
        bolt = bolt_request(raw, body, request.query_string, request.headers)
        return await to_aiohttp_response(await app.async_dispatch(bolt))

    web_app = web.Application()
    web_app.router.add_post(EVENTS_PATH, events)
    return web_app


async def serve(
    app: AsyncApp, settings: SlackSettings, health: PlatformHealth | None = None
) -> None:
    """Serve Slack until cancelled: Socket Mode with SLACK_APP_TOKEN, else HTTP on SLACK_PORT."""
    health = health or PlatformHealth("slack")
    if settings.app_token is not None:
        handler = CheckedSocketModeHandler(app, settings.app_token.get_secret_value())
        try:
            await handler.connect_async()
            log.info("slack: Socket Mode connected")
            health.connected()
            await asyncio.Event().wait()
        finally:
            await handler.close_async()
        return

    assert settings.signing_secret is not None  # build_app refused HTTP mode without one
    web_app = http_web_app(app, settings.signing_secret.get_secret_value())
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "0.0.0.0", settings.port).start()
        log.info("slack: HTTP mode on :%d%s", settings.port, EVENTS_PATH)
        health.connected()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()

"""HTTP mode acknowledges Slack before the work, and answers what bolt does not handle itself.

Over real HTTP to bot.slack.app's aiohttp handler, with bodies signed the way Slack signs them; the
router and the commands are the recording fakes of tests/support/slack_app.py (no Temporal here).
How fast the answers are is bench/slack_ack.py's to measure; here, what comes before what.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from bot.slack.actions import DECISION_ACTIONS
from bot.slack.app import handled
from bot.slack.commands import COMMANDS, SHORTCUTS, STATUS_SHORTCUT
from bot.slack.render import APPROVE_ACTION_ID
from bot.slack.requests import read_request
from harness.conditions import wait_for
from harness.fakes.slack_api import Delivery, signed_headers
from tests.support.slack_app import (
    ADMIN,
    CHANNEL,
    FORM,
    JSON,
    SECRET,
    SUPPORT,
    Endpoint,
    click_payload,
    interaction,
    posted_escalation,
    served_endpoint,
    signed,
)

Dispatch = Callable[[AsyncBoltRequest], Awaitable[BoltResponse]]


class BoltGate:
    """Holds every bolt dispatch of the endpoint's app until `open()`: while it is shut, whatever
    Slack gets back was answered without bolt."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._dispatch: Dispatch = endpoint.app.async_dispatch
        self._open = asyncio.Event()
        self.waiting = 0
        # Deliberately patched on this one app: every dispatch goes through the gate.
        endpoint.app.async_dispatch = self.dispatch  # type: ignore[method-assign]

    async def dispatch(self, req: AsyncBoltRequest) -> BoltResponse:
        self.waiting += 1
        await self._open.wait()
        return await self._dispatch(req)

    def open(self) -> None:
        self._open.set()


@pytest.fixture
async def endpoint(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Endpoint]:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with served_endpoint() as endpoint:
        yield endpoint


async def _post(endpoint: Endpoint, delivery: Delivery) -> tuple[int, str]:
    body = delivery.body.encode()
    # Bounded: an answer that waits for bolt while bolt is held would never come.
    return await asyncio.wait_for(endpoint.post(body, signed(body, delivery.content_type)), 10)


async def _requests_answered_at_once(endpoint: Endpoint) -> dict[str, Delivery]:
    """One of each request the handler answers itself: a message, a click, a command, a shortcut."""
    _, escalation_ts, _ = await posted_escalation(endpoint.slack)
    root_ts = endpoint.slack.add_message(CHANNEL, "refund 1234")
    return {
        "message": endpoint.sender.post(CHANNEL, "please refund order 1234"),
        "click": endpoint.sender.click(
            CHANNEL, escalation_ts, APPROVE_ACTION_ID, user=SUPPORT[0], name=SUPPORT[1]
        ),
        "command": endpoint.sender.command("/refund-hold", "", user=ADMIN[0], name=ADMIN[1]),
        "shortcut": endpoint.sender.shortcut(
            CHANNEL, root_ts, STATUS_SHORTCUT, user=ADMIN[0], name=ADMIN[1]
        ),
    }


async def test_requests_are_acknowledged_before_their_work_then_handled(
    endpoint: Endpoint,
) -> None:
    # The router and the commands wait (an unresponsive Temporal): Slack has its ack regardless.
    endpoint.router.gate = endpoint.commands.gate = gate = asyncio.Event()
    requests = await _requests_answered_at_once(endpoint)
    del requests["click"]  # its listener acks first too; its work is the click flow's
    for name, delivery in requests.items():
        assert await _post(endpoint, delivery) == (200, ""), name
    assert endpoint.router.messages == [] and endpoint.commands.calls == []
    assert [m.text for m in endpoint.router.kept] == ["please refund order 1234"]  # before "ok"

    gate.set()

    async def all_handled() -> bool:
        return len(endpoint.router.messages) == 1 and len(endpoint.commands.calls) == 2

    await wait_for(all_handled, timeout=5, what="every request handled after its ack")
    assert sorted(name for name, _ in endpoint.commands.calls) == ["refund_hold", "refund_status"]


async def test_what_bolt_does_not_handle_is_answered_without_it(endpoint: Endpoint) -> None:
    gate = BoltGate(endpoint)  # shut for good: none of these may reach bolt
    # URL verification: the challenge is in the answer.
    challenge = {"token": "x", "challenge": "c-42", "type": "url_verification"}
    body = json.dumps(challenge).encode()
    status, text = await endpoint.post(body, signed(body, JSON))
    assert (status, json.loads(text)) == (200, {"challenge": "c-42"})
    # No listener for these: acknowledged and dropped (bolt's 404 would make Slack retry).
    unknown = endpoint.sender.command("/refund-unknown", "", user=ADMIN[0], name=ADMIN[1])
    assert await _post(endpoint, unknown) == (200, "")
    click = interaction(click_payload([{"action_id": "not_ours", "value": "x"}]))
    assert await endpoint.post(click, signed(click, FORM)) == (200, "")
    assert gate.waiting == 0
    assert endpoint.commands.calls == [] and endpoint.router.clicks == []


def test_the_handler_answers_at_once_exactly_what_the_listeners_ack_empty(
    endpoint: Endpoint,
) -> None:
    # Every command, shortcut and button this app registers is one the handler answers itself.
    registered = {listener.ack_function.__name__ for listener in endpoint.app._async_listeners}
    assert {f"command_{c.strip('/').replace('-', '_')}" for c in COMMANDS} <= registered
    assert {f"shortcut_{s}" for s in SHORTCUTS} <= registered
    hook = "https://hooks.slack.com/commands/T1/1/x"
    user = {"id": "U1"}

    def answered_at_once(body: dict[str, Any]) -> bool:
        return handled(read_request(body))

    commands = {
        c
        for c in COMMANDS
        if answered_at_once({"command": c, "user_id": "U1", "response_url": hook})
    }
    assert commands == COMMANDS
    assert answered_at_once(
        {"type": "message_action", "callback_id": sorted(SHORTCUTS)[0], "user": user}
    )
    assert all(
        answered_at_once({"type": "block_actions", "user": user, "actions": [{"action_id": a}]})
        for a in DECISION_ACTIONS
    )
    assert answered_at_once({"type": "event_callback", "event": {"type": "message"}})
    # Anything else never reaches bolt.
    for body in (
        {"type": "url_verification", "challenge": "c"},
        {"type": "event_callback", "event": {"type": "app_mention"}},
        {"type": "block_actions", "user": user, "actions": [{"action_id": "not_ours"}]},
        {"type": "message_action", "callback_id": "not_ours", "user": user},
        {"type": "view_submission"},
        {"command": "/refund-unknown", "user_id": "U1", "response_url": hook},
    ):
        assert not answered_at_once(body), body


async def test_each_listener_acks_those_requests_with_an_empty_200(endpoint: Endpoint) -> None:
    # What bolt itself answers for each kind the handler answers at once: the same bare 200.
    _, escalation_ts, _ = await posted_escalation(endpoint.slack)
    root_ts = endpoint.slack.add_message(CHANNEL, "refund 1234")
    sender = endpoint.sender
    deliveries = [sender.post(CHANNEL, "please refund order 1234")]
    deliveries += [sender.command(c, "", user=ADMIN[0], name=ADMIN[1]) for c in COMMANDS]
    deliveries += [
        sender.shortcut(CHANNEL, root_ts, s, user=ADMIN[0], name=ADMIN[1]) for s in SHORTCUTS
    ]
    deliveries += [
        sender.click(CHANNEL, escalation_ts, a, user=SUPPORT[0], name=SUPPORT[1])
        for a in DECISION_ACTIONS
    ]
    for delivery in deliveries:
        request = AsyncBoltRequest(
            body=delivery.body, headers=dict(signed_headers(SECRET, delivery))
        )
        response = await endpoint.app.async_dispatch(request)
        assert (response.status, response.body) == (200, ""), delivery.payload

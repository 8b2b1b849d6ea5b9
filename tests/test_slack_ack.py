"""HTTP mode answers Slack before bolt runs, and keeps everything bolt would have answered.

Over real HTTP to bot.slack.app's aiohttp handler, with bodies signed the way Slack signs them; the
router and the commands are the recording fakes of tests/support/slack_app.py (no Temporal here).
How fast the answers are is bench/slack_ack.py's to measure; here, what comes before what.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from bot.slack.actions import DECISION_ACTIONS
from bot.slack.app import handled, serve
from bot.slack.commands import COMMANDS, SHORTCUTS, STATUS_SHORTCUT
from bot.slack.handover import Handovers
from bot.slack.render import APPROVE_ACTION_ID
from bot.slack.requests import read_request
from harness import free_port
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
    settings_for,
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


async def test_requests_are_answered_before_bolt_runs_then_handled(endpoint: Endpoint) -> None:
    gate = BoltGate(endpoint)
    requests = await _requests_answered_at_once(endpoint)
    for name, delivery in requests.items():
        # Bolt has not seen it (it cannot: the gate is shut), yet Slack has its bare ack.
        assert await _post(endpoint, delivery) == (200, ""), name
    assert endpoint.router.messages == [] and endpoint.router.clicks == []
    assert endpoint.commands.calls == []
    await wait_for(lambda: gate.waiting == len(requests), timeout=5, what="bolt's turn")

    gate.open()

    async def all_handled() -> bool:
        return (
            len(endpoint.router.messages) == 1
            and len(endpoint.router.clicks) == 1
            and len(endpoint.commands.calls) == 2
        )

    await wait_for(all_handled, timeout=5, what="every request handled after its ack")
    assert endpoint.router.messages[0].text == "please refund order 1234"
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


async def test_a_stop_hands_over_what_was_answered(endpoint: Endpoint) -> None:
    gate = BoltGate(endpoint)
    answered = await _post(endpoint, endpoint.sender.post(CHANNEL, "answered, then a stop"))
    assert answered == (200, "")
    await wait_for(lambda: gate.waiting == 1, timeout=5, what="bolt's turn")
    assert endpoint.runner is not None  # the fixture's
    stopping = asyncio.create_task(endpoint.runner.cleanup())

    async def not_listening() -> bool:
        try:
            await endpoint.post(b"", {})
        except aiohttp.ClientConnectionError:
            return True
        return False

    # The stop has closed the port (its first step) and waits for the request it answered.
    await wait_for(not_listening, timeout=5, what="the port closed")
    assert not stopping.done()
    gate.open()
    await asyncio.wait_for(stopping, timeout=10)
    assert [m.text for m in endpoint.router.messages] == ["answered, then a stop"]


async def test_serving_slack_leaves_the_start_up_heap_out_of_collections(
    endpoint: Endpoint,
) -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    settings = settings_for(endpoint.slack, port=free_port())
    serving = asyncio.create_task(serve(endpoint.app, settings))
    try:
        await wait_for(lambda: gc.get_freeze_count() > 0, timeout=10, what="the heap frozen")
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


# ---------------------------------------------------------------------------------------------
# Handovers: work waits for the burst to end
# ---------------------------------------------------------------------------------------------


class Arrivals:
    """Requests arriving every `every` seconds until stopped."""

    def __init__(self, handovers: Handovers, every: float = 0.02) -> None:
        self.handovers = handovers
        self.every = every
        self.count = 0
        self.task = asyncio.create_task(self._arrive())

    async def _arrive(self) -> None:
        while True:
            self.handovers.arrived()
            self.count += 1
            await asyncio.sleep(self.every)

    async def more(self, count: int) -> None:
        """Until `count` more requests have arrived."""
        until = self.count + count
        await wait_for(lambda: self.count >= until, timeout=5, what=f"{count} more arrivals")

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@pytest.fixture(autouse=True)
async def _collector_released() -> AsyncIterator[None]:
    """The collector is the process's: a test's Handovers still holding it after the test (its
    quiet spell not over) would release it in the middle of the next one."""
    yield
    await wait_for(gc.isenabled, timeout=10, what="every hold on the collector released")


def _recording(started: list[int], index: int) -> Callable[[], Awaitable[None]]:
    async def work() -> None:
        started.append(index)

    return work


async def test_work_waits_while_requests_keep_coming() -> None:
    handovers = Handovers(quiet=0.5, max_wait=60)
    started: list[int] = []
    arrivals = Arrivals(handovers)
    handovers.hand_over(_recording(started, 1))
    # Ten more requests: the work stays queued while they keep coming.
    await arrivals.more(10)
    assert started == []
    await arrivals.stop()
    await wait_for(lambda: started == [1], timeout=5, what="the work, once requests stopped")


async def test_work_waits_no_longer_than_max_wait() -> None:
    handovers = Handovers(quiet=0.5, max_wait=0.2)
    started: list[int] = []
    arrivals = Arrivals(handovers)
    try:
        handovers.hand_over(_recording(started, 1))
        await wait_for(lambda: started == [1], timeout=5, what="the work, requests still coming")
        assert not arrivals.task.done()
    finally:
        await arrivals.stop()


async def test_work_starts_in_the_order_it_was_handed_over() -> None:
    handovers = Handovers(quiet=0.01, max_wait=0.1)
    started: list[int] = []
    for index in range(10):
        handovers.hand_over(_recording(started, index))
    await wait_for(lambda: len(started) == 10, timeout=5, what="all ten")
    assert started == list(range(10))


async def test_drain_starts_what_waits_and_waits_for_it() -> None:
    handovers = Handovers(quiet=60, max_wait=60)  # it would never start on its own
    finished: list[str] = []

    async def slow() -> None:
        await asyncio.sleep(0.05)
        finished.append("slow")

    handovers.arrived()
    handovers.hand_over(slow)
    assert not gc.isenabled()  # held for the burst that arrived() began
    await handovers.drain(within=5)
    assert finished == ["slow"]
    assert gc.isenabled()


class _Node:
    partner: _Node


def _unreachable_cycle() -> weakref.ref[_Node]:
    node = _Node()
    node.partner = node
    return weakref.ref(node)


class Garbage:
    """A reference cycle only the cyclic collector can free, and a way to see that it has."""

    def __init__(self) -> None:
        # Enough tracked objects that a collection is due (the youngest generation's threshold).
        self._ballast: list[list[object]] = [[] for _ in range(gc.get_threshold()[0] * 2)]
        self._cycle = _unreachable_cycle()

    @property
    def collected(self) -> bool:
        return self._cycle() is None


async def test_the_garbage_collector_waits_for_the_burst_to_end() -> None:
    assert gc.isenabled()
    # A quiet spell of 2 s: a loaded machine's event-loop stall between two arrivals is shorter.
    handovers = Handovers(quiet=2, max_wait=60)
    arrivals = Arrivals(handovers)
    try:
        await wait_for(lambda: not gc.isenabled(), timeout=5, what="the collector held")
        garbage = Garbage()  # made while held: a collection is due, and it has to wait
        # Ten more requests, a collection long due: none runs while requests come.
        await arrivals.more(10)
        assert not gc.isenabled()
        assert not garbage.collected
    finally:
        await arrivals.stop()
    await wait_for(lambda: garbage.collected, timeout=10, what="the cycle collected, burst over")
    assert gc.isenabled()


async def test_the_garbage_collector_is_held_no_longer_than_max_wait() -> None:
    handovers = Handovers(quiet=0.5, max_wait=0.1)
    arrivals = Arrivals(handovers)
    try:
        await wait_for(lambda: not gc.isenabled(), timeout=5, what="the collector held")
        garbage = Garbage()
        await wait_for(lambda: garbage.collected, timeout=5, what="a collection, requests coming")
        assert not arrivals.task.done()
    finally:
        await arrivals.stop()


async def test_a_garbage_collector_disabled_elsewhere_is_left_disabled() -> None:
    handovers = Handovers(quiet=0.01, max_wait=0.1)
    started: list[int] = []
    gc.disable()
    try:
        handovers.arrived()
        handovers.hand_over(_recording(started, 1))
        # The collector is released (when this instance holds it) before work starts.
        await wait_for(lambda: started == [1], timeout=5, what="the work, once quiet")
        assert not gc.isenabled()
    finally:
        gc.enable()


async def test_work_that_fails_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    handovers = Handovers(quiet=0.01, max_wait=0.1)

    async def broken() -> None:
        raise RuntimeError("listener blew up")

    with caplog.at_level(logging.ERROR, logger="bot.slack.handover"):
        handovers.hand_over(broken)

        def logged() -> Any:
            return [r for r in caplog.records if "acknowledged request failed" in r.getMessage()]

        (record,) = await wait_for(logged, timeout=5, what="the failure logged")
    assert record.exc_info is not None and "listener blew up" in str(record.exc_info[1])

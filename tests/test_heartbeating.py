"""agent.activities.heartbeat: a regular Activity beats; a local one does not (its workflow task
is kept alive by the SDK, and a beat for it is refused by the Worker's core as UnknownActivity)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from temporalio import activity
from temporalio.testing import ActivityEnvironment

from agent.activities import heartbeat
from agent.activities.heartbeat import heartbeating


@activity.defn
async def slow_call() -> None:
    async with heartbeating():
        for _ in range(20):  # yields to the beat loop, which beats at once (interval 0)
            await asyncio.sleep(0)


@pytest.mark.parametrize(("is_local", "beats"), [(False, True), (True, False)])
async def test_only_a_regular_activity_heartbeats(
    monkeypatch: pytest.MonkeyPatch, is_local: bool, beats: bool
) -> None:
    monkeypatch.setattr(heartbeat, "HEARTBEAT_EVERY_SECONDS", 0.0)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, is_local=is_local)
    recorded: list[tuple[object, ...]] = []
    env.on_heartbeat = lambda *details: recorded.append(details)
    await env.run(slow_call)
    assert bool(recorded) is beats

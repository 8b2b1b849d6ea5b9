"""The crash drill's later loss: issue_refund's first attempt stops once the owner has the refund.

    issue_refund attempt 1 returns -> held here, heartbeating -> the Worker is SIGKILLed
        -> attempt 2 sends the same idempotency key -> the owner returns the same refund

The owner has accepted the refund and nothing on our side has recorded it: the one moment a
refund could be made twice, held still so that a presenter (or tests/test_crash_drill.py) can kill
the Worker there. The refund itself knows nothing of it: refund_bot.demos adds this interceptor
to a Worker whose REFUND_DRILL_PAUSE_AFTER_EFFECT is true, and loads this module only then.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from temporalio import activity
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from agent.activities.heartbeat import heartbeating
from agent.settings import ENV_FILE

EFFECT_ACTIVITY = "issue_refund"


class DrillSettings(BaseSettings):
    model_config = SettingsConfigDict(env_file=ENV_FILE, extra="ignore", env_ignore_empty=True)

    # On attempt 1 of issue_refund, stop after the owner accepted the refund and before the
    # Activity completes. A drill only: never on a Worker that serves customers.
    pause_after_effect: bool = Field(default=False, alias="REFUND_DRILL_PAUSE_AFTER_EFFECT")


def drill_interceptors() -> list[Interceptor]:
    """The Worker's interceptors for the drill, read from its settings: none unless it is on."""
    return [PauseAfterEffect()] if DrillSettings().pause_after_effect else []


class PauseAfterEffect(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _PauseAfterEffect(next)


class _PauseAfterEffect(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        result = await super().execute_activity(input)
        info = activity.info()
        if info.activity_type == EFFECT_ACTIVITY and info.attempt == 1:
            activity.logger.warning("DRILL | refund accepted, pausing before completion")
            # Heartbeating: the attempt ends with the Worker, not by its heartbeat timeout.
            async with heartbeating():
                await asyncio.Event().wait()
        return result

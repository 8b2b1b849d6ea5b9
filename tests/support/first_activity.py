"""A Worker interceptor that runs a hook before the first Activity of one type starts.

first Activity of `activity_type` -> await hook() -> the Activity runs. Later ones run at once.
Tests use it to hold a step mid-flight or to start it late, as a busy Worker would.
"""

from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor


class BeforeFirst(Interceptor):
    def __init__(self, activity_type: str, hook: Callable[[], Awaitable[None]]) -> None:
        self.activity_type = activity_type
        self.hook = hook
        self.ran = False

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _BeforeFirst(next, self)


class _BeforeFirst(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, before: BeforeFirst) -> None:
        super().__init__(next)
        self.before = before

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if activity.info().activity_type == self.before.activity_type and not self.before.ran:
            self.before.ran = True
            await self.before.hook()
        return await super().execute_activity(input)

"""The demo, composed onto the product from outside: the one module of the product that reaches
demo/, and only from inside these functions, each called when a demo or drill is asked for.

    REFUND_DRILL_PAUSE_AFTER_EFFECT true -> worker_interceptors: the drill's pause (demo.drill)
    /refund-demo                         -> SideBySide: the story's commands (demo.command)
    /refund-demo's crash, paused         -> paused_restart over Temporal (demo.paused_restart)
    a supervisor's control queues        -> supervisor_control: the paused restart's half
    refund-bot demo [--side-by-side]     -> tell: the unattended story in the terminal

The hooks are the product's own: Worker interceptors, bot.commands.SideBySideDemo, the
supervisor's ControlService, WorkerControl.restart's while_down.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from dotenv import dotenv_values
from pydantic import TypeAdapter, ValidationError
from temporalio.client import Client
from temporalio.worker import Interceptor

from agent.settings import ENV_FILE, AgentSettings, TemporalSettings
from agent.stores.databases import database_for
from bot.commands import (
    ChannelRef,
    CommandReply,
    DemoStage,
    DemoStages,
    SideBySideDemo,
    WorkerControl,
)
from bot.inbox import Inbox
from refund_bot.config import DRILL, ConfigError
from refund_bot.stack import Stack
from worker.control import RestartReport
from worker.supervisor import ControlService, WorkerSupervisor


def drill_asked_for() -> bool:
    """Whether the environment (or .env) turns the crash drill on, read without loading it."""
    value = os.environ.get(DRILL) or dotenv_values(ENV_FILE).get(DRILL)
    if not value:
        return False
    try:
        return TypeAdapter(bool).validate_python(value)
    except ValidationError as err:
        raise ConfigError(
            f"{DRILL}={value!r} is not true or false: set it to false (it is a drill only)"
        ) from err


def worker_interceptors() -> list[Interceptor]:
    """The Worker's interceptors from the demo: the drill's pause when asked for, else none."""
    if not drill_asked_for():
        return []
    from demo.drill import drill_interceptors

    return drill_interceptors()


def supervisor_control(supervisor: WorkerSupervisor) -> ControlService:
    """The presenter's paused restart, served on the supervisor's control queues beside
    /crash-worker's restart, so that /refund-demo's crash can hold any host's Worker down."""
    from demo.worker_hold import WorkerHold

    return WorkerHold(supervisor)


async def paused_restart(
    client: Client,
    control_task_queue: str,
    host: str | None,
    while_down: Callable[[], Awaitable[None]],
    *,
    supervisor: str | None = None,
) -> RestartReport:
    """WorkerControl.restart with while_down, over Temporal: the demo's paused restart."""
    from demo.paused_restart import paused_worker_restart

    return await paused_worker_restart(
        client, control_task_queue, host, while_down, supervisor=supervisor
    )


class _Story(SideBySideDemo, Protocol):
    async def aclose(self) -> None: ...


@dataclass
class SideBySide:
    """bot.commands.SideBySideDemo, built from demo/ the first time a presenter uses
    /refund-demo; a process where nobody does never loads it."""

    client: Client
    temporal: TemporalSettings
    settings: AgentSettings
    inbox: Inbox
    workers: WorkerControl
    child_env: Mapping[str, str] = field(default_factory=dict)
    _demos: _Story | None = None
    _migrated: bool = False

    def _built(self) -> _Story:
        if self._demos is None:
            from demo.command import SideBySideDemos
            from demo.pace import DemoPace
            from demo.side_by_side import StoryParts

            parts = StoryParts(
                self.client, self.temporal, self.settings, self.inbox, self.workers,
                dict(self.child_env),
            )  # fmt: skip
            self._demos = SideBySideDemos(parts, DemoPace(database_for(self.settings)))
        return self._demos

    @property
    def stages(self) -> DemoStages:
        return self._built().stages

    async def command(
        self, action: str, stage: DemoStage, channel: ChannelRef, seconds: float | None = None
    ) -> CommandReply:
        demos = self._built()
        if not self._migrated:
            from demo.pace import SCHEMA

            await database_for(self.settings).migrate(SCHEMA)
            self._migrated = True
        return await demos.command(action, stage, channel, seconds)

    async def aclose(self) -> None:
        """A story told here ends with this process: its plain loop stops too."""
        if self._demos is not None:
            await self._demos.aclose()


async def tell(stack: Stack, settings: AgentSettings, *, side_by_side: bool) -> int:
    """`refund-bot demo`: the unattended story on the running stack; its exit status."""
    assert stack.supervisor is not None  # running_stack always has one
    if side_by_side:
        from demo.terminal import SupervisorInProcess
        from demo.terminal import side_by_side as story

        return await story(stack, settings, SupervisorInProcess(stack.supervisor))
    from demo.crash_and_resume import crash_and_resume

    return await crash_and_resume(stack, settings)

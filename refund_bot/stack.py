"""The running stack, as `refund-bot run`, `refund-bot bot` and the demos hand it around.

    refund_bot.app.running_stack / running_bot -> Stack -> platforms, status line, demo stories

A value of its own so that the status line (refund_bot/status.py) and the stories (demo/) can read
it without importing the module that builds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.client import Client

from agent.settings import AgentSettings, TemporalSettings
from bot.commands import Commands
from bot.draining_router import DrainingRouter
from bot.inbox import Inbox
from worker.server import EmbeddedTemporal
from worker.supervisor import WorkerSupervisor


@dataclass
class Stack:
    """Everything a platform adapter needs, running. `run` has a server and a supervisor; `bot`
    has neither (its Workers run elsewhere)."""

    temporal: TemporalSettings
    settings: AgentSettings
    client: Client
    router: DrainingRouter
    commands: Commands
    inbox: Inbox
    supervisor: WorkerSupervisor | None = None
    server: EmbeddedTemporal | None = None
    web_ui: str | None = None
    host: str | None = None  # REFUND_BOT_HOST
    ops: str | None = None  # where /healthz is served, for the status line

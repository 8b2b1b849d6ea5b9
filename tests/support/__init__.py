"""Helpers for tests that run real processes (to wait on state: tests.support.conditions)."""

from __future__ import annotations

import os
import socket

from agent.settings import AgentSettings, CodecServerSettings, TemporalSettings
from bot.discord.settings import DiscordSettings
from bot.slack.settings import SlackSettings
from refund_bot.config import env_name


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists (signal 0 checks without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_environment() -> dict[str, str]:
    """This process's environment without any refund-bot setting a developer may have set, for a
    child process that must see only the settings its test gives it (run it where no .env is)."""
    classes = (TemporalSettings, AgentSettings, CodecServerSettings, SlackSettings, DiscordSettings)
    names = {env_name(cls, field) for cls in classes for field in cls.model_fields}
    return {k: v for k, v in os.environ.items() if k not in names}


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (children, their children, …), from /proc: a child that
    started its own session is still a descendant by parent pid."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # it ended while we looked
        children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found

"""Thread -> Workflow ID: a pure, documented function, so any bot replica derives the same ID.

    slack   : slack-<team>-<channel>-<thread_ts>       slack-T1-C2-1732860000.000100
    discord : discord-<guild>-<thread>                 discord-81384788765712384-1220000000000000000
    local   : local-<workspace>-<channel>-<thread>     local-local-support-t7

A Discord thread id is itself a channel id, unique across Discord, so its parent channel is left
out (a reply arriving in the thread does not always know its parent). Characters outside
[A-Za-z0-9._] are written as ~XX (hex) so the ID is made of safe characters only and two different
threads can never map to one ID, and an ID reads back into its parts (thread_link): /refund-queue
links each waiting escalation's thread without reading its history.
"""

from __future__ import annotations

import re

from agent.models import ThreadRef

_UNSAFE = re.compile(r"[^A-Za-z0-9._]")


def _part(value: str) -> str:
    return _UNSAFE.sub(lambda m: "".join(f"~{b:02X}" for b in m.group().encode()), value)


def workflow_id_for(thread: ThreadRef) -> str:
    parts: tuple[str, ...]
    if thread.platform == "discord":
        parts = ("discord", thread.workspace, thread.thread)
    else:
        parts = (thread.platform, thread.workspace, thread.channel, thread.thread)
    return "-".join(_part(p) for p in parts)


_ESCAPED = re.compile(r"~([0-9A-F]{2})")


def _unpart(value: str) -> str:
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), value)


def thread_link(workflow_id: str) -> str:
    """Where a conversation's thread is, for a person: a URL on Slack and Discord, the thread's
    name on the terminal; the ID itself if it is none of refund-bot's."""
    parts = [_unpart(p) for p in workflow_id.split("-")]
    if parts[0] == "slack" and len(parts) == 4:
        _, team, channel, ts = parts
        return f"https://app.slack.com/client/{team}/{channel}/thread/{channel}-{ts}"
    if parts[0] == "discord" and len(parts) == 3:
        _, guild, thread = parts
        return f"https://discord.com/channels/{guild}/{thread}"
    if parts[0] == "local" and len(parts) == 4:
        return f"thread {parts[3]}"
    return workflow_id

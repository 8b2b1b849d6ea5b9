"""Thread -> Workflow ID: a pure, documented function, so any bot replica derives the same ID.

    slack   : slack-<team>-<channel>-<thread_ts>       slack-T1-C2-1732860000.000100
    discord : discord-<guild>-<thread>                 discord-81384788765712384-1220000000000000000
    local   : local-<workspace>-<channel>-<thread>     local-local-support-t7

A Discord thread id is itself a channel id, unique across Discord, so its parent channel is left
out (a reply arriving in the thread does not always know its parent). Characters outside
[A-Za-z0-9._] are written as ~XX (hex) so the ID is made of safe characters only and two different
threads can never map to one ID. The reverse is never needed: the ID is always derivable.
"""

from __future__ import annotations

import re

from agent.models import ThreadRef

_UNSAFE = re.compile(r"[^A-Za-z0-9._]")


def _part(value: str) -> str:
    return _UNSAFE.sub(lambda m: "".join(f"~{b:02X}" for b in m.group().encode()), value)


def workflow_id_for(thread: ThreadRef) -> str:
    if thread.platform == "discord":
        parts = ("discord", thread.workspace, thread.thread)
    else:
        parts = (thread.platform, thread.workspace, thread.channel, thread.thread)
    return "-".join(_part(p) for p in parts)

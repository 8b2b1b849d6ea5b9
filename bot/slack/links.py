"""What presenters type into Slack slash commands: thread links, mentions, order numbers.

Slack slash commands carry the channel they were run in, not a thread, so `/refund-status` and
`/refund-release` name the conversation themselves: by the thread's link, by the order number, or
by the Workflow ID. Pure parsing here, plus the one Temporal read the order number needs.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

from temporalio.client import Client
from temporalio.service import RPCError

from agent.history import what_survives
from agent.models import Actor, ThreadRef
from agent.workflow import WORKFLOW_TYPE
from bot.ids import workflow_id_for

# (team id, order number) -> the Workflow ID of the open conversation about that order, or None.
FindByOrder = Callable[[str, str], Awaitable[str | None]]

# `<@U123>` or `<@U123|name>`: how Slack sends a mention in an escaped slash command's text.
_MENTION = re.compile(r"^<@([UW][A-Z0-9]+)(?:\|([^>]*))?>$")
# A bare member id, for presenters who paste one.
_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
# The message part of a permalink: p + the ts without its dot (16 digits: 10 + 6).
_PERMALINK_TS = re.compile(r"^p(\d{10})(\d{6})$")
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]+$")
_TS = re.compile(r"^\d{10}\.\d{6}$")
_TEAM_ID = re.compile(r"^[TE][A-Z0-9]+$")
_ORDER = re.compile(r"^#?(\d{1,12})$")

# How many open conversations the order search reads before it gives up (one history each).
MAX_SCANNED_CONVERSATIONS = 200


def parse_mention(text: str) -> Actor | None:
    """`<@U123|sam>` (or `<@U123>`, or `U123`) -> the Slack Actor; None for anything else."""
    text = text.strip()
    match = _MENTION.match(text)
    if match:
        return Actor(platform="slack", user_id=match.group(1), display_name=match.group(2) or "")
    if _USER_ID.match(text):
        return Actor(platform="slack", user_id=text)
    return None


def _unwrap(text: str) -> str:
    # With "escape channels, users and links" on, Slack sends a typed link as <url> or <url|label>.
    text = text.strip()
    if text.startswith("<") and text.endswith(">"):
        text = text[1:-1].split("|", 1)[0]
    return text


def parse_thread_link(text: str, team_id: str) -> ThreadRef | None:
    """A Slack message permalink -> the ThreadRef of the thread it belongs to.

        https://acme.slack.com/archives/C0SUPPORT/p1732860000000100
        https://acme.slack.com/archives/C0SUPPORT/p1732860000000200?thread_ts=1732860000.000100&cid=C0SUPPORT

    A reply's permalink carries its thread's root in `thread_ts`; a root's is the message itself.
    The link names no team, so the caller gives the team the command ran in. Anything else,
    however malformed (`https://[::1/…`), is None.
    """
    try:
        parts = urlsplit(_unwrap(text))
        host = (parts.hostname or "").lower()
    except ValueError:  # an unclosed IPv6 bracket, a port that is not a number
        return None
    if parts.scheme != "https" or not (host == "slack.com" or host.endswith(".slack.com")):
        return None
    path = [p for p in parts.path.split("/") if p]
    if len(path) != 3 or path[0] != "archives" or not _CHANNEL_ID.match(path[1]):
        return None
    message = _PERMALINK_TS.match(path[2])
    if not message:
        return None
    query = parse_qs(parts.query)
    root = (query.get("thread_ts") or [f"{message.group(1)}.{message.group(2)}"])[0]
    channel = (query.get("cid") or [path[1]])[0]
    if not _TS.match(root) or not _CHANNEL_ID.match(channel):
        return None
    return ThreadRef(platform="slack", workspace=team_id, channel=channel, thread=root)


def parse_order_number(text: str) -> str | None:
    match = _ORDER.match(text.strip())
    return match.group(1) if match else None


def conversation_prefix(team_id: str) -> str:
    """Every Slack conversation of this workspace has a Workflow ID starting with this."""
    return f"slack-{team_id}-"


def thread_workflow_id(team_id: str, channel: str, root_ts: str) -> str:
    return workflow_id_for(
        ThreadRef(platform="slack", workspace=team_id, channel=channel, thread=root_ts)
    )


async def find_open_conversation_by_order(
    client: Client,
    team_id: str,
    order_number: str,
    *,
    limit: int = MAX_SCANNED_CONVERSATIONS,
) -> str | None:
    """The newest running conversation of this workspace whose looked-up order is `order_number`.

    Demo scale: it lists running conversations through Temporal visibility and reads each one's
    recorded position (what_survives) until one matches, so it costs one describe per conversation
    and only finds a conversation once the agent has looked its order up. A deployment with many
    open conversations would record the order number in a search attribute instead.
    """
    if not _TEAM_ID.match(team_id) or parse_order_number(order_number) is None:
        return None  # never build a visibility query from anything but plain ids
    query = (
        f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' "
        f"AND WorkflowId STARTS_WITH '{conversation_prefix(team_id)}'"
    )
    scanned = 0
    async for execution in client.list_workflows(query):
        scanned += 1
        if scanned > limit:
            break
        try:
            survivors = await what_survives(client, execution.id)
        except RPCError:
            continue  # finished or vanished between the list and the read
        if survivors.order is not None and survivors.order.order_number == order_number:
            return execution.id
    return None


def order_finder(client: Client) -> FindByOrder:
    """The default `find_by_order` for build_app, reading from this Temporal client."""

    async def find(team_id: str, order_number: str) -> str | None:
        return await find_open_conversation_by_order(client, team_id, order_number)

    return find

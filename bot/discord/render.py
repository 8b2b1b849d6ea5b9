"""What one OutboundMessage looks like on Discord: pure functions, no I/O.

Custom ids are the contract with the inbound adapter: `refund:<action>:r<round>:<workflow_id>`,
where action is `approve` or `deny` and round is the escalation round the buttons answer. A click
carries both back, so it routes without a lookup table and survives bot restarts (persistent
components). Buttons posted before rounds existed read `refund:<action>:<workflow_id>`; the same
template matches them (round None). Discord caps a custom_id at 100 characters; custom_id_for
refuses a longer one rather than let Discord reject the whole message (a Workflow ID of up to 75
characters always fits: 100 - len("refund:approve:r999999999:")).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple, get_args

import discord

from agent.models import Actor, MessageEdit, MessageKey, OutboundMessage

Action = Literal["approve", "deny"]
ACTIONS: tuple[Action, ...] = get_args(Action)

CUSTOM_ID_PREFIX = "refund"
MAX_CUSTOM_ID = 100  # Discord's limit on a component's custom_id
MAX_CONTENT = 2000  # Discord's limit on message content
MAX_NONCE = 25  # Discord's limit on a message nonce
ELLIPSIS = "…"

# For a discord.py DynamicItem(template=CUSTOM_ID_TEMPLATE): discord.py matches it with fullmatch.
# The round is optional, so buttons posted before rounds existed still match. No Workflow ID starts
# with "r<digits>:" (bot.ids), so the two forms never read as each other.
CUSTOM_ID_TEMPLATE = (
    rf"{CUSTOM_ID_PREFIX}:(?P<action>approve|deny):(?:r(?P<round>\d{{1,9}}):)?"
    r"(?P<workflow_id>\S+)"
)
CUSTOM_ID_RE = re.compile(CUSTOM_ID_TEMPLATE)


class ButtonId(NamedTuple):
    """What a decision button's custom_id carries."""

    action: Action
    workflow_id: str
    round: int | None  # None: a button posted before rounds existed


_BUTTONS: dict[Action, tuple[str, discord.ButtonStyle]] = {
    "approve": ("Approve", discord.ButtonStyle.success),
    "deny": ("Deny", discord.ButtonStyle.danger),
}


def custom_id_for(action: Action, workflow_id: str, round: int | None = None) -> str:
    """The custom_id of an escalation button. Raises ValueError if it cannot fit Discord's limit."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    tag = "" if round is None else f"r{round}:"
    custom_id = f"{CUSTOM_ID_PREFIX}:{action}:{tag}{workflow_id}"
    if parse_custom_id(custom_id, limit=None) != (action, workflow_id, round):
        raise ValueError(f"workflow id {workflow_id!r} cannot be carried in a custom_id")
    if len(custom_id) > MAX_CUSTOM_ID:
        raise ValueError(
            f"custom_id would be {len(custom_id)} characters, Discord allows {MAX_CUSTOM_ID}: "
            f"workflow id {workflow_id!r} is too long"
        )
    return custom_id


def parse_custom_id(custom_id: str, limit: int | None = MAX_CUSTOM_ID) -> ButtonId | None:
    """What a button's custom_id carries, or None if it is not one of ours."""
    if limit is not None and len(custom_id) > limit:
        return None
    match = CUSTOM_ID_RE.fullmatch(custom_id)
    if match is None:
        return None
    action: Action = "approve" if match["action"] == "approve" else "deny"
    round = int(match["round"]) if match["round"] is not None else None
    return ButtonId(action, match["workflow_id"], round)


def nonce_for(key: MessageKey) -> str:
    """A deterministic nonce for a message key: every retry of one post sends the same nonce.

    Base32 of SHA-256, cut to Discord's 25 characters (125 bits), so distinct keys do not collide
    in practice and nothing about the conversation is readable from the nonce.
    """
    digest = hashlib.sha256(str(key).encode()).digest()
    return base64.b32encode(digest).decode().lower()[:MAX_NONCE]


def fit_content(text: str, limit: int = MAX_CONTENT) -> str:
    """Cut text to `limit` characters, ending in an ellipsis when cut.

    Counted in UTF-16 code units, which is never fewer than code points: whichever way Discord
    counts, a cut message is accepted instead of failing the post with a 400.
    """
    if utf16_len(text) <= limit:
        return text
    budget = limit - utf16_len(ELLIPSIS)
    out: list[str] = []
    used = 0
    for char in text:
        width = utf16_len(char)
        if used + width > budget:
            break
        out.append(char)
        used += width
    return "".join(out) + ELLIPSIS


def components_for(
    workflow_id: str, actions: list[Action], round: int | None = None
) -> list[dict[str, Any]]:
    """One action row with a button per action, in the order given (duplicates dropped)."""
    buttons = []
    for action in dict.fromkeys(actions):
        label, style = _BUTTONS[action]
        buttons.append(
            {
                "type": discord.ComponentType.button.value,
                "style": style.value,
                "label": label,
                "custom_id": custom_id_for(action, workflow_id, round),
            }
        )
    return [{"type": discord.ComponentType.action_row.value, "components": buttons}]


def is_role_id(role: str) -> bool:
    """All digits: a role id (as bot.discord.grants reads it); anything else is a role name."""
    return role.isascii() and role.isdigit()


def mention_for(
    message: OutboundMessage, approver_role: str | None, named: Sequence[str] = ()
) -> tuple[str, list[str]]:
    """(what the post opens with, the role ids it may ping). The approvers' reminder mentions
    DISCORD_APPROVER_ROLE, `<@&id>`, which pings that role and no other: given by id, that id;
    given by name, the ids of the guild's roles of that name (`named`, read by the poster). A name
    no role has is written in bold and pings nobody. Every other post: ("", [])."""
    role = (approver_role or "").strip()
    if message.mention != "approvers" or not role:
        return "", []
    ids = [role] if is_role_id(role) else list(dict.fromkeys(named))
    if ids:
        return "".join(f"<@&{i}> " for i in ids), ids
    return f"**{discord.utils.escape_markdown(role)}** ", []


def payload_for(
    message: OutboundMessage, approver_role: str | None = None, named: Sequence[str] = ()
) -> dict[str, Any]:
    """The JSON body of POST /channels/{thread_id}/messages for one outbound message (`named`:
    the ids of the roles named `approver_role`, when it is a name; see mention_for)."""
    lead, roles = mention_for(message, approver_role, named)
    allowed: dict[str, Any] = {"parse": []}
    if roles:
        allowed["roles"] = roles  # the approver role, in its reminder: nothing else is parsed
    payload: dict[str, Any] = {
        "content": fit_content(lead + message.text),
        # The text may quote a customer ("@everyone", "<@123>"): the bot pings nobody, except
        # the approver role it names itself in the approvers' reminder.
        "allowed_mentions": allowed,
        # With enforce_nonce, Discord returns the earlier message for a repeated nonce (same author,
        # within a few minutes) instead of posting again: that is what makes a retry safe.
        "nonce": nonce_for(message.key),
        "enforce_nonce": True,
    }
    if message.actions:
        payload["components"] = components_for(
            message.key.workflow_id, message.actions, message.round
        )
    return payload


def named(actor: Actor) -> str:
    """How a post names a person: a Discord user by their mention, `<@id>` (Discord shows the
    name they go by; allowed_mentions keeps it from pinging), so that a name they chose cannot
    format or link; anyone else by their label, its markdown escaped."""
    if actor.platform == "discord" and actor.user_id.isascii() and actor.user_id.isdigit():
        return f"<@{actor.user_id}>"
    return discord.utils.escape_markdown(actor.label)


def edit_payload_for(edit: MessageEdit) -> dict[str, Any]:
    """The JSON body of PATCH /channels/{thread_id}/messages/{id}: what happened, no buttons."""
    who = named(edit.decided_by) if edit.decided_by is not None else None
    return {
        "content": fit_content(f"{edit.text}\n\n{edit.outcome_line(who)}"),
        "components": [],
        "allowed_mentions": {"parse": []},
    }


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2

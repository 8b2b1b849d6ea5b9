"""What one OutboundMessage looks like in Slack: Block Kit, fallback text, message metadata.

Pure functions, no I/O, so the inbound adapter and the tests can import the same constants.
"""

from __future__ import annotations

import re
from typing import Any

from agent.models import MessageEdit, OutboundMessage

# Button ids: the inbound adapter registers handlers for these; a click's `value` is the Workflow
# ID and the escalation round, `<workflow id>#<round>`, so routing the click back needs no lookup
# table. Buttons posted before rounds existed carry the Workflow ID alone.
APPROVE_ACTION_ID = "refund_approve"
DENY_ACTION_ID = "refund_deny"
DECISION_BLOCK_ID = "refund_decision"
TEXT_BLOCK_ID_PREFIX = "refund_text_"

# Message metadata carries the post's stable key; it is how a retried post finds the earlier one.
METADATA_EVENT_TYPE = "refund_bot_message"

# Slack's documented limits: a section's text is at most 3000 characters, a message at most 50
# blocks; the top-level `text` is cut by Slack at 40000 and should stay under 4000.
SECTION_TEXT_LIMIT = 3000
MAX_TEXT_SECTIONS = 10
FALLBACK_TEXT_LIMIT = 3900

# A user group's id as Slack gives it (S…): nothing else is ever written into a mention.
_USER_GROUP_ID = re.compile(r"^S[A-Z0-9]{2,}$")

_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_BUTTONS: dict[str, tuple[str, str, str]] = {
    # decision: (action_id, label, style)
    "approve": (APPROVE_ACTION_ID, "Approve", "primary"),
    "deny": (DENY_ACTION_ID, "Deny", "danger"),
}


def escape(text: str) -> str:
    """Slack mrkdwn escaping: `<!channel>`, `<@U…>` and `<url|label>` all need a literal `<`."""
    # `&` first is implied: each character is replaced once, so `&lt;` is never re-escaped.
    return "".join(_ESCAPES.get(ch, ch) for ch in text)


def unescape(text: str) -> str:
    """What a person typed, from text Slack sends escaped (slash-command text, message text).

    Slack escapes only these three; `&amp;` goes last so a typed `&lt;` stays `&lt;`.
    """
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _escaped_chunks(text: str, limit: int) -> list[str]:
    # Split on the raw characters so an entity like `&amp;` is never cut in half.
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for ch in text:
        piece = _ESCAPES.get(ch, ch)
        if size + len(piece) > limit:
            chunks.append("".join(current))
            current, size = [], 0
        current.append(piece)
        size += len(piece)
    if current or not chunks:
        chunks.append("".join(current))
    return chunks


def mention_for(message: OutboundMessage, approver_group: str | None) -> str:
    """What the post opens with: the approvers' user group, `<!subteam^S…> `, in their reminder
    when SLACK_APPROVER_GROUP is set; "" for every other post, and when no group is set."""
    group = (approver_group or "").strip()
    if message.mention != "approvers" or not _USER_GROUP_ID.match(group):
        return ""
    return f"<!subteam^{group}> "


def fallback_text(message: OutboundMessage, approver_group: str | None = None) -> str:
    """The top-level `text`: notifications and screen readers use it when blocks are present, so
    a group mention goes here too (it is what notifies the group)."""
    lead = mention_for(message, approver_group)
    chunks = _escaped_chunks(message.text, FALLBACK_TEXT_LIMIT - len(lead))
    text = lead + (chunks[0] if len(chunks) == 1 else chunks[0] + "…")
    if message.actions:
        text += " (approve or deny in the thread)"
    return text


def _text_blocks(text: str, lead: str = "") -> list[dict[str, Any]]:
    # `lead` is markup of ours (a group mention), put before the escaped text, never escaped.
    chunks = _escaped_chunks(text, SECTION_TEXT_LIMIT - len(lead))
    if len(chunks) > MAX_TEXT_SECTIONS:
        chunks = [*chunks[: MAX_TEXT_SECTIONS - 1], "…"]
    chunks[0] = lead + chunks[0]
    return [
        {
            "type": "section",
            "block_id": f"{TEXT_BLOCK_ID_PREFIX}{i}",
            # verbatim: Slack would otherwise auto-link channel names and parse some mentions
            # in the text; escaped customer text must reach the reader exactly as typed. Our own
            # `<!subteam^…>` is markup, which Slack still reads with verbatim on.
            "text": {"type": "mrkdwn", "text": chunk or " ", "verbatim": True},
        }
        for i, chunk in enumerate(chunks)
    ]


def blocks_for(message: OutboundMessage, approver_group: str | None = None) -> list[dict[str, Any]]:
    """Section block(s) with the escaped text (after the approvers' mention, in their reminder),
    then Approve / Deny buttons when requested."""
    blocks = _text_blocks(message.text, mention_for(message, approver_group))
    if message.actions:
        value = button_value(message.key.workflow_id, message.round)
        blocks.append(
            {
                "type": "actions",
                "block_id": DECISION_BLOCK_ID,
                "elements": [_button(decision, value) for decision in message.actions],
            }
        )
    return blocks


def edited_blocks(edit: MessageEdit) -> list[dict[str, Any]]:
    """The escalation's own text, and in place of its buttons a line saying what happened."""
    return [
        *_text_blocks(edit.text),
        {
            "type": "context",
            "block_id": DECISION_BLOCK_ID,
            "elements": [{"type": "mrkdwn", "text": edited_line(edit)}],
        },
    ]


def edited_line(edit: MessageEdit) -> str:
    """ "Approved by <@U…>: refund issued (…)", escaped; the clicker as a mention (no ping)."""
    who = None
    if edit.decided_by is not None:
        actor = edit.decided_by
        who = f"<@{actor.user_id}>" if actor.platform == "slack" else escape(actor.label)
    escaped = edit.model_copy(update={"outcome": escape(edit.outcome)})
    return escaped.outcome_line(who)


def button_value(workflow_id: str, round: int | None) -> str:
    return workflow_id if round is None else f"{workflow_id}#{round}"


def parse_button_value(value: str) -> tuple[str, int | None]:
    """(workflow id, round) from a button's value; round None for buttons from before rounds."""
    workflow_id, sep, round = value.rpartition("#")
    if sep and round.isdigit() and len(round) <= 9:
        return workflow_id, int(round)
    return value, None


def _button(decision: str, value: str) -> dict[str, Any]:
    action_id, label, style = _BUTTONS[decision]
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label},
        "style": style,
        "value": value,
    }


def metadata_for(message: OutboundMessage) -> dict[str, Any]:
    """Slack message metadata naming this post; `event_payload.key` is what dedup compares."""
    return {
        "event_type": METADATA_EVENT_TYPE,
        "event_payload": {
            "key": str(message.key),
            "workflow_id": message.key.workflow_id,
            "run_id": message.key.run_id,
            "seq": message.key.seq,
            "kind": message.kind,
        },
    }


def metadata_payload(slack_message: dict[str, Any]) -> dict[str, Any]:
    """The payload of our metadata on a Slack message object (`metadata_for`), or {}."""
    metadata = slack_message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != METADATA_EVENT_TYPE:
        return {}
    payload = metadata.get("event_payload")
    return payload if isinstance(payload, dict) else {}


def metadata_key(slack_message: dict[str, Any]) -> str | None:
    """The message key a Slack message object carries in its metadata, or None."""
    key = metadata_payload(slack_message).get("key")
    return key if isinstance(key, str) else None

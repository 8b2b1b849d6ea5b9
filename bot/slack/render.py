"""What one OutboundMessage looks like in Slack: Block Kit, fallback text, message metadata.

Pure functions, no I/O, so the inbound adapter and the tests can import the same constants.
"""

from __future__ import annotations

from typing import Any

from agent.models import OutboundMessage

# Button ids: the inbound adapter registers handlers for these; a click's `value` is the Workflow
# ID, so routing the click back needs no lookup table.
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


def fallback_text(message: OutboundMessage) -> str:
    """The top-level `text`: notifications and screen readers use it when blocks are present."""
    chunks = _escaped_chunks(message.text, FALLBACK_TEXT_LIMIT)
    text = chunks[0] if len(chunks) == 1 else chunks[0] + "…"
    if message.actions:
        text += " (approve or deny in the thread)"
    return text


def blocks_for(message: OutboundMessage) -> list[dict[str, Any]]:
    """Section block(s) with the escaped text, then Approve / Deny buttons when requested."""
    chunks = _escaped_chunks(message.text, SECTION_TEXT_LIMIT)
    if len(chunks) > MAX_TEXT_SECTIONS:
        chunks = [*chunks[: MAX_TEXT_SECTIONS - 1], "…"]
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "block_id": f"{TEXT_BLOCK_ID_PREFIX}{i}",
            # verbatim: Slack would otherwise auto-link channel names and parse some mentions
            # in the text; escaped customer text must reach the reader exactly as typed.
            "text": {"type": "mrkdwn", "text": chunk or " ", "verbatim": True},
        }
        for i, chunk in enumerate(chunks)
    ]
    if message.actions:
        blocks.append(
            {
                "type": "actions",
                "block_id": DECISION_BLOCK_ID,
                "elements": [
                    _button(decision, message.key.workflow_id) for decision in message.actions
                ],
            }
        )
    return blocks


def _button(decision: str, workflow_id: str) -> dict[str, Any]:
    action_id, label, style = _BUTTONS[decision]
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label},
        "style": style,
        "value": workflow_id,
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


def metadata_key(slack_message: dict[str, Any]) -> str | None:
    """The message key a Slack message object carries in its metadata, or None."""
    metadata = slack_message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != METADATA_EVENT_TYPE:
        return None
    payload = metadata.get("event_payload")
    key = payload.get("key") if isinstance(payload, dict) else None
    return key if isinstance(key, str) else None

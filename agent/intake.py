"""Which thread messages become answers: one rule, applied by the Workflow.

    customer_message Signal | customer_message_update Update
        -> seen before? -> from the thread's customer? -> text left? -> inbox

The Workflow applies it as messages arrive (agent/workflow.py). Pure and deterministic.
"""

from __future__ import annotations

from agent.models import MAX_TEXT_CHARS, Actor, CustomerMessage

# The two ways a customer's message reaches the Workflow, by their names in Event History: the
# Signal, and the Update the router sends first (bot/conversations.py; it needs no wait for the
# server's transfer queue).
MESSAGE_SIGNAL = "customer_message"
MESSAGE_UPDATE = "customer_message_update"

# How many message and click ids a conversation remembers, so a redelivered one applies once
# without the list growing for ever.
MAX_SEEN_IDS = 200


def remember(seen: list[str], message_id: str) -> bool:
    """Record an id in `seen` (oldest dropped past MAX_SEEN_IDS); False if it was there already:
    a platform retry or a reconnect's replay of the same message or click."""
    if message_id in seen:
        return False
    seen.append(message_id)
    del seen[:-MAX_SEEN_IDS]
    return True


def from_customer(message: CustomerMessage, customer: Actor) -> bool:
    """Only the thread's customer answers the agent."""
    author = message.author
    return (author.platform, author.user_id) == (customer.platform, customer.user_id)


def answer_text(message: CustomerMessage) -> str:
    """The text an answer keeps: trimmed, and cut to MAX_TEXT_CHARS (empty: not an answer)."""
    return message.text.strip()[:MAX_TEXT_CHARS]

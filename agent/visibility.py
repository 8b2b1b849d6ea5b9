"""What a conversation records for Temporal's visibility: searchable, never customer text.

    the Workflow -> upsert_search_attributes -> `temporal workflow list --query ...`, the Web UI

Custom search attributes must be registered on the namespace before a Workflow sets them (a task
that sets an unknown one fails). refund-bot registers SEARCH_ATTRIBUTES on the server it embeds and
on the tests' dev servers; docs/versioning.md gives the command for Temporal Cloud or a cluster.
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

# The Workflow version whose code started the conversation (agent/versions.py).
VERSION_ATTRIBUTE = SearchAttributeKey.for_keyword("RefundBotVersion")

SEARCH_ATTRIBUTES: tuple[SearchAttributeKey, ...] = (VERSION_ATTRIBUTE,)


def dev_server_args() -> list[str]:
    """SEARCH_ATTRIBUTES as `temporal server start-dev` flags."""
    kinds = {"KEYWORD": "Keyword", "INT": "Int", "DATETIME": "Datetime", "TEXT": "Text"}
    return [
        arg
        for key in SEARCH_ATTRIBUTES
        for arg in ("--search-attribute", f"{key.name}={kinds[key.indexed_value_type.name]}")
    ]

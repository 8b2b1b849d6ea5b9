"""Every read a conversation makes of the SQLite stores is served by an index, not a whole table.

A conversation runs with each SQLite connection tracing its statements (with their values bound);
afterwards each statement is explained (EXPLAIN QUERY PLAN) on the file it ran on. A plan that
SCANs a table reads every row of it, so the step's cost grows with the shop's history: the orders
of every customer, every refund ever made. `lookup_customer_history` did that until the domain
store's migration 2 (orders by customer).
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path
from typing import Any

from agent.settings import AgentSettings
from agent.stores.databases import close_database, database_for
from bot.local.thread_store import LocalThreadStore
from harness.conversation import SUPPORT, LocalConversation
from harness.inproc import running_worker

# Scans that are not the agent's: the local terminal names a new thread one past the highest name
# in use (t1, t2, …), once per thread it opens. It is the offline channel a person types into.
NOT_THE_AGENTS = ("SELECT MAX(CAST(SUBSTR(thread_id, 2) AS INTEGER)) FROM threads",)
# "SCAN orders", "SCAN orders USING COVERING INDEX …" (the whole index): both read every row.
# SQLite's plans for a constant row or a subquery's result say CONSTANT ROW or a name in brackets.
WHOLE_TABLE = re.compile(r"^SCAN (?!CONSTANT ROW)(?!\()")


def _table(sql: str) -> str:
    """The table a statement reads FROM."""
    match = re.search(r"FROM\s+(\w+)", sql)
    assert match is not None, sql
    return match.group(1)


async def test_a_conversation_reads_no_table_whole(client, tmp_path, monkeypatch) -> None:
    statements: list[tuple[Path, str]] = []
    tracing = False  # from the conversation's start: not the Worker's start-up (migrations, seed)
    connect = sqlite3.connect

    def tracing_connect(path: str | Path, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(path, *args, **kwargs)

        def trace(sql: str) -> None:
            if tracing:
                statements.append((Path(path), sql))

        conn.set_trace_callback(trace)
        return conn

    monkeypatch.setattr(sqlite3, "connect", tracing_connect)
    settings = AgentSettings(_env_file=None, data_dir=tmp_path)
    threads = LocalThreadStore(database_for(settings))
    try:
        async with running_worker(client, settings, threads) as task_queue:
            conv = LocalConversation(client, threads, task_queue)
            tracing = True
            handle = await conv.open("refund order 4500")
            await conv.answer_the_questions()
            assert (await conv.next_bot_message()).kind == "escalation"
            await conv.click("approve", SUPPORT)
            outcome = await asyncio.wait_for(handle.result(), timeout=60)
        assert outcome.status == "refunded"
    finally:
        await close_database(settings.store_url)
    monkeypatch.undo()

    reads = [
        (path, sql)
        for path, sql in statements
        if re.match(r"\s*(SELECT|UPDATE|DELETE|INSERT\s.*\sSELECT\s)", sql, re.S | re.I)
        and not sql.lstrip().startswith(NOT_THE_AGENTS)
        and "schema_migrations" not in sql
    ]
    tables_read = {_table(sql) for _, sql in reads if "FROM" in sql}
    # The trace saw the stores a conversation reads: its order, the customer's history (orders and
    # the ledger's refunds), the live grant, its thread's posts.
    assert {"orders", "customers", "accounts", "refunds", "grants", "messages"} <= tables_read
    whole = []
    for path, sql in dict.fromkeys(reads):
        with sqlite3.connect(path) as db:
            plan = [row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}")]
        whole += [f"{path.name}: {sql}\n    {step}" for step in plan if WHOLE_TABLE.match(step)]
    assert not whole, "reads that scan a whole table:\n" + "\n".join(whole)

"""The stores' contract, held on both backends: SQLite files and a real PostgreSQL server.

Each test runs once per backend (the `database` fixture). Concurrency is real: attempts run at
once on connections of their own, and "two hosts" are two Database objects (two pools), as two
processes would have. What only PostgreSQL can promise (row locks, never a table-wide wait) is
tested on PostgreSQL alone, by name.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import sys
from datetime import date

import asyncpg
import pytest
from temporalio.exceptions import ApplicationError

from agent.models import Actor, MessageEdit, MessageKey, OutboundMessage, ThreadRef
from agent.settings import DEMO_CUSTOMER, AgentSettings
from agent.stores import domain as domain_store
from agent.stores import grants as grants_store
from agent.stores import ledger as ledger_store
from agent.stores.database import Database, Schema
from agent.stores.databases import close_database, new_database
from agent.stores.domain import SEED_ORDERS, DomainStore
from agent.stores.grants import SEED_GRANTS, GrantStore
from agent.stores.ledger import (
    AlreadyRefunded,
    IdempotencyConflict,
    Ledger,
    RefundRejected,
    SeedRefund,
)
from bot import hold as hold_store
from bot import inbox as inbox_store
from bot.hold import HoldSwitch
from bot.inbox import Inbox
from bot.local import thread_store
from bot.local.thread_store import LocalThreadStore
from harness.conditions import wait_for
from harness.conversation import SUPPORT, LocalConversation
from harness.inproc import running_worker

ALL_SCHEMAS: tuple[Schema, ...] = (
    domain_store.SCHEMA,
    grants_store.SCHEMA,
    ledger_store.SCHEMA,
    inbox_store.SCHEMA,
    hold_store.SCHEMA,
    thread_store.SCHEMA,
)
ALICE = Actor(platform="slack", user_id="U0ALICE")
ADMIN = Actor(platform="slack", user_id="U0ADMIN")


async def two_hosts(database_url: str) -> tuple[Database, Database]:
    """Two Databases on one URL, as two processes (or hosts) would each open it."""
    return new_database(database_url), new_database(database_url)


async def closed(*databases: Database) -> None:
    for database in databases:
        await database.close()


# ------------------------------------------------------------------------------------------------
# Grants
# ------------------------------------------------------------------------------------------------


async def test_seed_grants_once_and_a_revoked_seed_grant_stays_revoked(database) -> None:
    grants = GrantStore(database)
    await grants.seed()
    await grants.seed()
    live = await grants.live_grants()
    assert len(live) == len(SEED_GRANTS)
    support = Actor(platform="local", user_id="support")
    assert await grants.revoke(support, "refund_approver", ADMIN) == 1
    await grants.seed()
    assert await grants.live_grant(support, "refund_approver") is None


async def test_a_grant_replaces_the_live_one_and_revoke_counts(database) -> None:
    grants = GrantStore(database)
    first = await grants.grant(ALICE, "refund_approver", 5000, ADMIN)
    second = await grants.grant(ALICE, "refund_approver", 9000, ADMIN)
    assert second.grant_id > first.grant_id
    live = await grants.live_grant(ALICE, "refund_approver")
    assert live is not None and (live.grant_id, live.limit_cents) == (second.grant_id, 9000)
    assert live.granted_by == "slack:U0ADMIN"
    assert [g.grant_id for g in await grants.live_grants()] == [second.grant_id]
    assert await grants.revoke(ALICE, "refund_approver", ADMIN) == 1
    assert await grants.revoke(ALICE, "refund_approver", ADMIN) == 0
    assert await grants.live_grant(ALICE, "refund_approver") is None


async def test_grants_racing_from_two_hosts_leave_one_live_grant(database_url) -> None:
    hosts = await two_hosts(database_url)
    try:
        await asyncio.gather(*(GrantStore(h).seed() for h in hosts))  # both start at once
        made = await asyncio.gather(
            *(
                GrantStore(hosts[i % 2]).grant(ALICE, "refund_approver", 1000 * i, ADMIN)
                for i in range(1, 9)
            )
        )
        live = [g for g in await GrantStore(hosts[0]).live_grants() if g.user_id == "U0ALICE"]
        assert len(live) == 1
        assert live[0].grant_id == max(g.grant_id for g in made)  # the last made stands
        assert len(await GrantStore(hosts[1]).live_grants()) == len(SEED_GRANTS) + 1
    finally:
        await closed(*hosts)


# ------------------------------------------------------------------------------------------------
# Ledger
# ------------------------------------------------------------------------------------------------

PAYMENT = ("pi_a", 8000, "usd")


def refund_of(key: str, payment_ref: str = "pi_a", amount: int = 8000, workflow: str = "wf-1"):
    return {
        "idempotency_key": key,
        "payment_ref": payment_ref,
        "amount_cents": amount,
        "currency": "usd",
        "workflow_id": workflow,
        "order_number": "1234",
    }


async def test_the_ledger_behaves_as_stripes_idempotent_requests(database) -> None:
    ledger = Ledger(database)
    await ledger.seed_payments([PAYMENT, ("pi_b", 3000, "usd")])
    await ledger.seed_payments([PAYMENT])  # idempotent
    first = await ledger.create_refund(**refund_of("k1", amount=5000))
    again = await ledger.create_refund(**refund_of("k1", amount=5000))
    assert (again.refund_id, again.created_at, again.calls) == (
        first.refund_id,
        first.created_at,
        2,
    )
    with pytest.raises(IdempotencyConflict):
        await ledger.create_refund(**refund_of("k1", amount=4000))
    with pytest.raises(IdempotencyConflict):  # the key's other payment, even an unknown one
        await ledger.create_refund(**refund_of("k1", payment_ref="pi_nowhere"))
    with pytest.raises(RefundRejected, match="No such payment"):
        await ledger.create_refund(**refund_of("k2", payment_ref="pi_nowhere"))
    with pytest.raises(AlreadyRefunded, match=r"unrefunded amount on payment \(3000\)"):
        await ledger.create_refund(**refund_of("k3", amount=3001, workflow="wf-2"))
    rest = await ledger.create_refund(**refund_of("k3", amount=3000, workflow="wf-2"))
    with pytest.raises(RefundRejected) as refused:  # nothing refunded yet: not "already"
        await ledger.create_refund(**refund_of("k4", payment_ref="pi_b", amount=3001))
    assert not isinstance(refused.value, AlreadyRefunded)
    (made,) = await ledger.refunds_for_workflow("wf-1")
    assert (made.refund_id, made.calls) == (first.refund_id, 2)  # refused calls counted nothing
    assert [r.refund_id for r in await ledger.refunds_for_payments(["pi_a", "pi_b"])] == [
        first.refund_id,
        rest.refund_id,
    ]
    assert await ledger.refunds_for_payments([]) == []
    assert len(await ledger.all_refunds()) == 2


async def test_seed_refunds_are_recorded_once(database) -> None:
    ledger = Ledger(database)
    await ledger.seed_payments([("pi_demo_1001", 1800, "usd")])
    seed = SeedRefund(
        payment_ref="pi_demo_1001",
        amount_cents=1800,
        currency="usd",
        order_number="1001",
        refunded_on="2024-01-02",
    )
    await ledger.seed_refunds([seed])
    await ledger.seed_refunds([seed])
    (refund,) = await ledger.all_refunds()
    assert (refund.idempotency_key, refund.workflow_id, refund.created_at) == (
        "refund-bot-demo-refund-1001",
        "",
        "2024-01-02T12:00:00+00:00",
    )


async def test_concurrent_attempts_with_one_key_make_one_refund(database_url) -> None:
    """Twelve attempts with one key at once, from two hosts: one refund, every attempt counted,
    every attempt answered with that refund."""
    hosts = await two_hosts(database_url)
    try:
        await Ledger(hosts[0]).seed_payments([PAYMENT])
        results = await asyncio.gather(
            *(Ledger(hosts[i % 2]).create_refund(**refund_of("same-key")) for i in range(12))
        )
        assert {r.refund_id for r in results} == {results[0].refund_id}
        (refund,) = await Ledger(hosts[1]).all_refunds()
        assert refund.calls == 12
        assert sorted(r.calls for r in results) == list(range(1, 13))
    finally:
        await closed(*hosts)


async def test_concurrent_refunds_of_different_payments_all_go_through(database_url) -> None:
    hosts = await two_hosts(database_url)
    try:
        await Ledger(hosts[0]).seed_payments([(f"pi_{i}", 1000 + i, "usd") for i in range(12)])
        results = await asyncio.gather(
            *(
                Ledger(hosts[i % 2]).create_refund(
                    **refund_of(f"key-{i}", f"pi_{i}", 1000 + i, f"wf-{i}")
                )
                for i in range(12)
            )
        )
        assert len({r.refund_id for r in results}) == 12
        assert len(await Ledger(hosts[1]).all_refunds()) == 12
    finally:
        await closed(*hosts)


async def test_concurrent_refunds_of_one_payment_under_different_keys_make_one(
    database_url,
) -> None:
    """The race for one order, across hosts: conversations on one order race with their own keys;
    the owner refunds once and refuses the rest as already refunded."""
    hosts = await two_hosts(database_url)
    try:
        await Ledger(hosts[0]).seed_payments([PAYMENT])
        results = await asyncio.gather(
            *(
                Ledger(hosts[i % 2]).create_refund(**refund_of(f"conv-{i}", workflow=f"wf-{i}"))
                for i in range(10)
            ),
            return_exceptions=True,
        )
        made = [r for r in results if not isinstance(r, BaseException)]
        refused = [r for r in results if isinstance(r, BaseException)]
        assert len(made) == 1
        assert len(refused) == 9 and all(isinstance(e, AlreadyRefunded) for e in refused)
        assert [r.refund_id for r in await Ledger(hosts[1]).all_refunds()] == [made[0].refund_id]
    finally:
        await closed(*hosts)


async def test_postgresql_refunds_of_other_payments_never_wait(postgres_url) -> None:
    """No table-wide lock: while a transaction holds payment A's row (as a refund of A being
    decided does), a refund of payment B completes, and a refund of A waits for it."""
    ledger = Ledger(new_database(postgres_url))
    await ledger.seed_payments([("pi_A", 5000, "usd"), ("pi_B", 5000, "usd")])
    holder = await asyncpg.connect(postgres_url)
    try:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute("SELECT 1 FROM payments WHERE payment_ref = 'pi_A' FOR UPDATE")
        of_a = asyncio.create_task(ledger.create_refund(**refund_of("a", "pi_A", 5000, "wf-a")))
        of_b = await asyncio.wait_for(
            ledger.create_refund(**refund_of("b", "pi_B", 5000, "wf-b")), timeout=20
        )
        assert of_b.status == "succeeded"
        waiting = await holder.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        )
        assert waiting == 1 and not of_a.done()  # A's refund waits on A's row, and only it
        await transaction.rollback()
        assert (await asyncio.wait_for(of_a, timeout=20)).status == "succeeded"
    finally:
        await holder.close()
        await close_database(postgres_url)


# ------------------------------------------------------------------------------------------------
# Domain
# ------------------------------------------------------------------------------------------------

CUSTOMER = Actor(platform="local", user_id="customer")
MARLOW = Actor(platform="local", user_id="marlow")


async def test_domain_seed_orders_accounts_and_links(database) -> None:
    domain = DomainStore(database)
    today = date(2025, 6, 1)
    await domain.seed(today)
    await domain.seed(today)  # idempotent
    order = await domain.order_for("1234", CUSTOMER)
    assert order is not None and (order.item, order.amount_cents, order.final_sale) == (
        "plush python",
        8000,
        False,
    )
    assert order.purchased_at == "2025-05-20"
    assert await domain.order_for("7777", CUSTOMER) is None  # another customer's: as unknown
    assert await domain.order_for("9999", CUSTOMER) is None
    final_sale = await domain.order_for("3003", CUSTOMER)
    assert final_sale is not None and final_sale.final_sale
    account = await domain.account(CUSTOMER)
    assert account is not None and account.customer_id == DEMO_CUSTOMER
    assert [o.order_number for o in account.orders] == ["1001", "3003", "1234", "4500"]
    assert await domain.account(Actor(platform="slack", user_id="U0STRANGER")) is None
    linked = DomainStore(database, lambda platform: DEMO_CUSTOMER)
    stranger = Actor(platform="slack", user_id="U0NEW")
    for store in (linked, domain):  # linked on first contact: the same account from then on
        account = await store.account(stranger)
        assert account is not None and account.customer_id == DEMO_CUSTOMER
    payments = await domain.payments()
    assert ("pi_demo_1234", 8000, "usd") in payments and len(payments) == len(SEED_ORDERS)
    await domain.set_payment_ref("1234", "pi_stripe_1234")
    offline = [o.order_number for o in await domain.orders_paid_offline()]
    assert offline == ["1001", "3003", "4500", "7777"]


async def test_placed_orders_and_customers_from_two_hosts_never_share_a_number(
    database_url,
) -> None:
    hosts = await two_hosts(database_url)
    try:
        await DomainStore(hosts[0]).seed()
        placed = await asyncio.gather(
            *(DomainStore(hosts[i % 2]).place_order(SEED_ORDERS[0]) for i in range(8))
        )
        numbers = sorted(int(o.order_number) for o in placed)
        assert numbers == list(range(domain_store.FIRST_PLACED_ORDER, 10009))
        someone = Actor(platform="local", user_id="demo-1")
        customer_id = await DomainStore(hosts[1]).place_customer(DEMO_CUSTOMER, someone)
        account = await DomainStore(hosts[0]).account(someone)
        assert account is not None and account.customer_id == customer_id
        assert account.display_name == "Nyghtowl" and account.orders == []
    finally:
        await closed(*hosts)


# ------------------------------------------------------------------------------------------------
# Inbox, hold switch
# ------------------------------------------------------------------------------------------------


async def test_the_inbox_keeps_orders_retries_and_buries(database) -> None:
    inbox = Inbox(database)
    payload = ThreadRef(platform="slack", workspace="T1", channel="C2", thread="1.2")
    first = await inbox.put("message", payload, "wf-1")
    second = await inbox.put("message", payload, "wf-2")
    assert second > first
    await inbox.failed(second, "refused", 123.5)
    found = await inbox.first_for("wf-1")
    assert found is not None and found.seq == first and await inbox.first_for("wf-3") is None
    pending = await inbox.pending()
    assert [(p.seq, p.workflow_id, p.attempts, p.retry_at) for p in pending] == [
        (first, "wf-1", 0, None),
        (second, "wf-2", 1, 123.5),
    ]
    assert ThreadRef.model_validate_json(pending[0].payload) == payload
    await inbox.failed(first, "timed out", 456.0)
    (failed, _) = await inbox.pending()
    assert (failed.attempts, failed.last_error, failed.retry_at) == (1, "timed out", 456.0)
    await inbox.bury(second, "never", attempted=True)
    (dead,) = await inbox.dead_letters()
    assert (dead.seq, dead.attempts, dead.error, dead.workflow_id) == (second, 2, "never", "wf-2")
    assert str(await inbox.depth()) == "1 waiting, 1 dead letter"
    await inbox.remove(first)
    assert await inbox.size() == 0 and await inbox.pending() == []


async def test_the_inbox_commits_a_burst_of_keeps_together_in_arrival_order(
    database, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox = Inbox(database)
    await inbox.size()  # the schema in place: what follows counts only the keeps
    connections = 0
    connect = database.connect

    def counted(schema: Schema):
        nonlocal connections
        connections += 1
        return connect(schema)

    monkeypatch.setattr(database, "connect", counted)
    payload = ThreadRef(platform="slack", workspace="T1", channel="C2", thread="1.2")
    seqs = await asyncio.gather(*(inbox.put("message", payload, f"wf-{i % 7}") for i in range(100)))
    # Each keep returned once its entry was committed: all 100 there, in the order they came ...
    assert seqs == sorted(seqs) and len(set(seqs)) == 100
    monkeypatch.undo()
    assert [p.seq for p in await Inbox(database).pending()] == seqs
    # ... in a few transactions, not one (and one fsync) each.
    assert connections <= 3, connections


async def test_the_inbox_keeps_an_unreadable_event_straight_as_a_dead_letter(database) -> None:
    inbox = Inbox(database)
    payload = ThreadRef(platform="slack", workspace="T1", channel="C2", thread="1.2")
    waiting = await inbox.put("message", payload, "wf-1")
    dead_seq = await inbox.keep_dead("unreadable", payload, "`event.user_profile`: not a string")
    again = await inbox.keep_dead("unreadable", payload, "another")
    assert waiting < dead_seq < again  # numbered with the inbox's entries, on either backend
    assert [p.seq for p in await inbox.pending()] == [waiting]  # it holds nothing back
    first, _ = await inbox.dead_letters()
    assert (first.seq, first.kind, first.attempts, first.workflow_id) == (
        dead_seq,
        "unreadable",
        0,
        None,
    )
    assert first.error == "`event.user_profile`: not a string"
    assert ThreadRef.model_validate_json(first.payload) == payload
    assert str(await inbox.depth()) == "1 waiting, 2 dead letters"


async def test_the_hold_switch_is_shared_and_defaults_until_set(database_url) -> None:
    hosts = await two_hosts(database_url)
    try:
        assert await HoldSwitch(hosts[0], default=True).enabled()
        assert not await HoldSwitch(hosts[0], default=False).enabled()
        await HoldSwitch(hosts[0], default=False).set(True)
        assert await HoldSwitch(hosts[1], default=False).enabled()
        await HoldSwitch(hosts[1], default=True).set(False)
        assert not await HoldSwitch(hosts[0], default=True).enabled()
    finally:
        await closed(*hosts)


# ------------------------------------------------------------------------------------------------
# The local channel's threads
# ------------------------------------------------------------------------------------------------


def outbound(thread: str, seq: int, text: str, round_: int | None = None) -> OutboundMessage:
    return OutboundMessage(
        thread=ThreadRef(platform="local", workspace="local", channel="support", thread=thread),
        key=MessageKey(workflow_id=f"local-{thread}", run_id="run-1", seq=seq),
        kind="escalation" if round_ else "question",
        text=text,
        actions=["approve", "deny"] if round_ else [],
        round=round_,
    )


async def test_threads_opened_at_once_get_distinct_names(database_url) -> None:
    hosts = await two_hosts(database_url)
    try:
        roots = await asyncio.gather(
            *(
                LocalThreadStore(hosts[i % 2]).open_thread("support", "customer", f"refund {i}")
                for i in range(8)
            )
        )
        assert sorted(r.thread_id for r in roots) == sorted(f"t{n}" for n in range(1, 9))
        listed = await LocalThreadStore(hosts[0]).threads()
        assert [t.thread_id for t in listed] == [r.thread_id for r in sorted(roots, key=_seq)]
    finally:
        await closed(*hosts)


def _seq(message) -> int:
    return message.seq


async def test_a_post_is_one_row_per_key_even_when_retried_at_once(database_url) -> None:
    hosts = await two_hosts(database_url)
    try:
        threads = LocalThreadStore(hosts[0])
        root = await threads.open_thread("support", "customer", "refund 1234")
        message = outbound(root.thread_id, 1, "Was the package opened?")
        posted = await asyncio.gather(
            *(LocalThreadStore(hosts[i % 2]).post(message) for i in range(6))
        )
        assert len({p.platform_message_id for p in posted}) == 1
        assert sum(not p.duplicate for p in posted) == 1
        reply = await threads.add_reply(root.thread_id, "customer", "Yes")
        messages = await threads.messages(root.thread_id)
        assert [(m.kind, m.author_is_bot) for m in messages] == [
            ("customer", False),
            ("question", True),
            ("reply", False),
        ]
        assert await threads.messages(root.thread_id, after_seq=reply.seq) == []
        assert [m.seq for m in await threads.messages()] == [m.seq for m in messages]
    finally:
        await closed(*hosts)


async def test_a_reader_tailing_by_number_never_passes_a_message_committed_late(
    postgres_url,
) -> None:
    """The terminal shows each message past the last number it showed. On PostgreSQL a number is
    taken at the insert and committed whenever: a customer's reply numbered first but committed
    after the agent's next post (two hosts writing at once) was passed over for good. The second
    appender now waits for the first to commit, so numbers commit in order."""
    hosts = await two_hosts(postgres_url)
    try:
        threads = LocalThreadStore(hosts[0])
        root = await threads.open_thread("support", "customer", "refund 1234")

        async def waiting_for_the_first() -> bool:
            async with hosts[0].connect(thread_store.SCHEMA) as db:
                return bool(await db.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted"))

        # The other host's reply, appended as add_reply does, and held before its commit.
        async with LocalThreadStore(hosts[1])._appending() as db:
            await thread_store._add_message(db, root.thread_id, "customer", "reply", "Yes")
            later = asyncio.create_task(threads.post(outbound(root.thread_id, 1, "Damaged how?")))
            await wait_for(
                lambda: later.done() or waiting_for_the_first(),
                what="the agent's post committed, or waiting for the reply's",
            )
            tail = await threads.messages(after_seq=root.seq)  # the reply is not committed yet
        await later
        tail += await threads.messages(after_seq=max((m.seq for m in tail), default=root.seq))
        assert [m.text for m in tail] == ["Yes", "Damaged how?"]
    finally:
        await closed(*hosts)


async def test_an_escalation_keeps_its_round_and_an_edit_is_logged_once(database) -> None:
    threads = LocalThreadStore(database)
    root = await threads.open_thread("support", "customer", "refund 4500")
    escalation = outbound(root.thread_id, 2, "This refund needs a support agent", round_=1)
    await threads.post(escalation)
    (posted,) = [m for m in await threads.messages(root.thread_id) if m.author_is_bot]
    assert (posted.round, posted.actions) == (1, ["approve", "deny"])
    edit = MessageEdit(
        thread=escalation.thread,
        key=escalation.key,
        platform_message_id=posted.message_id,
        text=escalation.text,
        outcome="refund issued",
    )
    await asyncio.gather(threads.edit(edit), threads.edit(edit))  # a retry, at once
    ((number, edited),) = await threads.edits()
    assert edited.actions == [] and edited.text.startswith(escalation.text + "\n")
    assert edited.round == 1 and await threads.edits(after_edit=number) == []
    missing = edit.model_copy(update={"key": MessageKey(workflow_id="x", run_id="y", seq=9)})
    with pytest.raises(ApplicationError, match="no local message"):
        await threads.edit(missing)


# ------------------------------------------------------------------------------------------------
# Migrations and the exclusive lock
# ------------------------------------------------------------------------------------------------


async def _recorded(database: Database) -> list[tuple[str, int]]:
    rows = []
    for schema in ALL_SCHEMAS:
        async with database.connect(schema) as db:
            rows += [
                (row["store"], int(row["version"]))
                for row in await db.fetch(
                    "SELECT store, version FROM schema_migrations WHERE store = ? ORDER BY version",
                    schema.name,
                )
            ]
    return rows


EVERY_VERSION = sorted((s.name, m.version) for s in ALL_SCHEMAS for m in s.migrations)


async def test_migrations_run_twice_apply_once(database_url) -> None:
    first, second = await two_hosts(database_url)
    try:
        await first.migrate(*ALL_SCHEMAS)
        await first.migrate(*ALL_SCHEMAS)
        await second.migrate(*ALL_SCHEMAS)  # another process, later: nothing left to do
        assert sorted(await _recorded(second)) == EVERY_VERSION
    finally:
        await closed(first, second)


async def test_migrations_run_at_once_by_many_processes_apply_once(database_url) -> None:
    """Four Database objects in this process and three other processes migrate one empty
    database at the same moment."""
    script = (  # only the stores' modules: a process that starts fast
        "import asyncio, sys\n"
        "from agent.stores import domain, grants, ledger\n"
        "from agent.stores.databases import new_database\n"
        "from bot import hold, inbox\n"
        "from bot.local import thread_store\n"
        "schemas = [m.SCHEMA for m in (domain, grants, ledger, inbox, hold, thread_store)]\n"
        "asyncio.run(new_database(sys.argv[1]).migrate(*schemas))\n"
    )
    databases = [new_database(database_url) for _ in range(4)]
    try:
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-c", script, database_url, stderr=asyncio.subprocess.PIPE
            )
            for _ in range(3)
        ]
        await asyncio.gather(*(d.migrate(*ALL_SCHEMAS) for d in databases))
        for proc in procs:
            _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
            assert proc.returncode == 0, err.decode()
        assert sorted(await _recorded(databases[0])) == EVERY_VERSION
        assert await Ledger(databases[1]).all_refunds() == []  # the stores work
    finally:
        await closed(*databases)


async def test_a_schema_newer_than_this_code_is_said_and_still_used(
    database, caplog: pytest.LogCaptureFixture
) -> None:
    await database.migrate(hold_store.SCHEMA)
    async with database.connect(hold_store.SCHEMA) as db:
        await db.execute(
            "INSERT INTO schema_migrations (store, version, name, applied_at) "
            "VALUES ('hold', 99, 'from the future', '2030-01-01')"
        )
    fresh = new_database(database.url)  # another process, started after the newer one
    try:
        with caplog.at_level(logging.WARNING, logger="agent.stores.database"):
            await HoldSwitch(fresh, default=False).set(True)
        assert "hold store is at schema version 99, newer than this" in caplog.text
        assert await HoldSwitch(fresh, default=False).enabled()
    finally:
        await closed(fresh)


async def test_the_exclusive_lock_admits_one_holder(database_url) -> None:
    hosts = await two_hosts(database_url)
    try:
        async with hosts[0].exclusive("discord-gateway") as first:
            async with hosts[1].exclusive("discord-gateway") as second:
                assert (first, second) == (True, False)
            async with hosts[1].exclusive("another-lock") as other:
                assert other
        async with hosts[1].exclusive("discord-gateway") as after:
            assert after  # released when the holder's block ended
    finally:
        await closed(*hosts)


async def test_the_default_is_the_sqlite_files_in_data_dir(tmp_path) -> None:
    settings = AgentSettings(_env_file=None, data_dir=tmp_path)
    assert settings.store_url == f"sqlite:///{tmp_path}"
    url = "postgresql://refund:pw@db.example.com/refund"
    # A str, as the environment gives it (the settings' __init__ is typed SecretStr).
    chosen = AgentSettings(_env_file=None, data_dir=tmp_path, DATABASE_URL=url)  # type: ignore[arg-type]
    assert chosen.store_url == url and "pw" not in repr(chosen)


async def test_a_sqlite_data_directory_from_before_migrations_keeps_its_data(tmp_path) -> None:
    """Files as the release before DATABASE_URL left them (no schema_migrations table, an inbox
    from before its added columns, two live grants of one role from a race): adopted as version
    1, migrated on, every row kept."""
    with sqlite3.connect(tmp_path / "grants.sqlite") as db:
        db.executescript(
            "CREATE TABLE grants (grant_id INTEGER PRIMARY KEY AUTOINCREMENT, platform TEXT NOT "
            "NULL, user_id TEXT NOT NULL, role TEXT NOT NULL, limit_cents INTEGER, granted_at "
            "TEXT NOT NULL, granted_by TEXT NOT NULL, revoked_at TEXT, revoked_by TEXT);"
            "INSERT INTO grants (platform, user_id, role, limit_cents, granted_at, granted_by) "
            "VALUES ('slack', 'U0ALICE', 'refund_approver', 100, '2025-01-01', 'x'), "
            "('slack', 'U0ALICE', 'refund_approver', 200, '2025-01-02', 'y');"
        )
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
        db.executescript(
            "CREATE TABLE payments (payment_ref TEXT PRIMARY KEY, amount_cents INTEGER NOT NULL, "
            "currency TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'succeeded');"
            "CREATE TABLE refunds (refund_id TEXT PRIMARY KEY, idempotency_key TEXT NOT NULL "
            "UNIQUE, payment_ref TEXT NOT NULL REFERENCES payments(payment_ref), amount_cents "
            "INTEGER NOT NULL, currency TEXT NOT NULL, status TEXT NOT NULL, workflow_id TEXT NOT "
            "NULL, order_number TEXT NOT NULL, created_at TEXT NOT NULL, calls INTEGER NOT NULL "
            "DEFAULT 1);"
            "INSERT INTO payments VALUES ('pi_old', 8000, 'usd', 'succeeded');"
            "INSERT INTO refunds VALUES ('re_old', 'k-old', 'pi_old', 8000, 'usd', 'succeeded', "
            "'wf-old', '1234', '2025-01-01T00:00:00+00:00', 1);"
        )
    with sqlite3.connect(tmp_path / "inbox.sqlite") as db:
        db.executescript(
            "CREATE TABLE inbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, "
            "payload TEXT NOT NULL, queued_at TEXT NOT NULL);"
            "INSERT INTO inbox (kind, payload, queued_at) VALUES ('start', '{}', '2025-01-01');"
        )
    database = new_database(f"sqlite:///{tmp_path}")
    grant = await GrantStore(database).live_grant(ALICE, "refund_approver")
    assert grant is not None and grant.limit_cents == 200  # the newer of the two stands
    (old,) = await Ledger(database).all_refunds()
    assert (old.refund_id, old.calls) == ("re_old", 1)
    again = await Ledger(database).create_refund(
        idempotency_key="k-old",
        payment_ref="pi_old",
        amount_cents=8000,
        currency="usd",
        workflow_id="wf-old",
        order_number="1234",
    )
    assert (again.refund_id, again.calls) == ("re_old", 2)
    (entry,) = await Inbox(database).pending()
    assert (entry.kind, entry.workflow_id, entry.attempts) == ("start", None, 0)
    assert ("grants", 1) in await _recorded(database)
    assert ("grants", 2) in await _recorded(database)


# ------------------------------------------------------------------------------------------------
# One conversation with every store on PostgreSQL
# ------------------------------------------------------------------------------------------------


async def test_an_escalated_conversation_refunds_once_with_every_store_on_postgresql(
    client, tmp_path, postgres_url
) -> None:
    """The Worker's activities on a real PostgreSQL: the order looked up in the domain store,
    the approver's seeded grant read live, the refund made in the ledger, the thread's posts and
    edit in the local channel's tables. Nothing is written to the data directory's SQLite files."""
    settings = AgentSettings(_env_file=None, data_dir=tmp_path, DATABASE_URL=postgres_url)
    bot_side = new_database(postgres_url)  # the terminal's own pool, as in another process
    threads = LocalThreadStore(bot_side)
    try:
        async with running_worker(client, settings, threads) as task_queue:
            conv = LocalConversation(client, threads, task_queue)
            handle = await conv.open("refund order 4500")
            assert (await conv.next_bot_message()).text == "Was the package opened?"
            await conv.reply("Yes")
            assert (await conv.next_bot_message()).text == "What was damaged?"
            await conv.reply("Split seam")
            assert (await conv.next_bot_message()).kind == "escalation"
            await conv.click("approve", SUPPORT)
            outcome = await asyncio.wait_for(handle.result(), timeout=60)
        assert outcome.status == "refunded" and outcome.refund is not None
        (refund,) = await Ledger(bot_side).refunds_for_workflow(handle.id)
        assert (refund.amount_cents, refund.calls) == (45000, 1)
        assert not list(tmp_path.glob("*.sqlite"))
    finally:
        await closed(bot_side)
        await close_database(postgres_url)

"""What a customer's history costs to read as the shop grows: with the orders-by-customer index
(the domain store's migration 2) against the same file without it.

    DomainStore.account(actor) (what lookup_customer_history reads: the customer, their orders)
      -> domain.sqlite migrated (orders_by_customer)      -> SEARCH orders USING INDEX
      -> a copy of it with the index dropped (as before)  -> SCAN orders, every row

Both files hold the same orders: the seed's, then `--orders` more, spread over a thousand other
customers. The demo customer's history is read, alternately from each file, in one process, so
both see the same machine; each call is timed in wall time.

    .venv/bin/python -m bench.store_reads [--orders 1000 10000 100000] [--calls 500]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

from agent.models import Actor
from agent.settings import DEMO_CUSTOMER
from agent.stores import domain as domain_store
from agent.stores.domain import DomainStore
from agent.stores.sqlite import SqliteDatabase
from bench import percentile, run_benchmark

CUSTOMERS = 1000
DEMO_ACCOUNT = Actor(platform="local", user_id="customer")


def _demo_customer(platform: str) -> str:
    return DEMO_CUSTOMER


def _add_orders(path: Path, orders: int) -> None:
    """`orders` more orders, on CUSTOMERS customers of their own (not the demo customer's)."""
    today = date.today()
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO customers (customer_id, display_name, customer_since) VALUES (?, ?, ?)",
            [(f"cus_bench_{c}", f"Customer {c}", "2020-01-01") for c in range(CUSTOMERS)],
        )
        db.executemany(
            "INSERT INTO orders (order_number, customer_id, item, amount_cents, currency, status, "
            "purchased_at, final_sale, payment_ref) VALUES (?, ?, 'mug', 1200, 'usd', "
            "'delivered', ?, 0, ?)",
            [
                (
                    str(900_000 + i),
                    f"cus_bench_{i % CUSTOMERS}",
                    (today - timedelta(days=i % 365)).isoformat(),
                    f"pi_bench_{i}",
                )
                for i in range(orders)
            ],
        )


async def _one_size(orders: int, calls: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        indexed_dir, scanned_dir = Path(tmp, "indexed"), Path(tmp, "scanned")
        indexed = SqliteDatabase(indexed_dir)
        await DomainStore(indexed, _demo_customer).seed()
        await indexed.close()
        _add_orders(indexed.path(domain_store.SCHEMA), orders)
        shutil.copytree(indexed_dir, scanned_dir)
        scanned = SqliteDatabase(scanned_dir)
        with sqlite3.connect(scanned.path(domain_store.SCHEMA)) as connection:
            connection.execute("DROP INDEX orders_by_customer")
        stores = {
            "index": DomainStore(indexed, _demo_customer),
            "no index": DomainStore(scanned, _demo_customer),
        }
        wall: dict[str, list[float]] = {name: [] for name in stores}
        for s in stores.values():  # connections open and pages cached before the clock
            assert await s.account(DEMO_ACCOUNT) is not None
        for _ in range(calls):
            for name, s in stores.items():
                started = time.perf_counter()
                await s.account(DEMO_ACCOUNT)
                wall[name].append((time.perf_counter() - started) * 1000)
        for db in (indexed, scanned):
            await db.close()
    return wall["index"], wall["no index"]


async def main(sizes: list[int], calls: int) -> None:
    print(f"DomainStore.account (lookup_customer_history's read), {calls} calls each, interleaved")
    print("(milliseconds, wall time):")
    for orders in sizes:
        indexed, scanned = await _one_size(orders, calls)
        print(
            f"  {orders:>7,d} orders   index p50 {statistics.median(indexed):7.3f} "
            f"p99 {percentile(indexed, 99):7.3f}   no index p50 {statistics.median(scanned):7.3f} "
            f"p99 {percentile(scanned, 99):7.3f}   "
            f"no index / index {statistics.median(scanned) / statistics.median(indexed):6.1f}x",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    run_benchmark(main(args.orders, args.calls))

"""The one database every process of a multi-process test shares, and what a test reads from it.

    shared_database fixture -> SharedDatabase.env (each process's settings) -> the processes
    the test -> place_order (the demo world) ... refunds_for (the ledger: the owner's answer)

The database is a fresh one on the suite's PostgreSQL server (harness/postgres.py), as a
deployment on several hosts would have it: each process keeps a DATA_DIR of its own (its logs, its
pid files), and every store (grants, ledger, domain data, inbox, hold switch, the Discord gateway
lease) goes through DATABASE_URL.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from agent.models import OrderDetails
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from agent.stores.domain import SeedOrder
from agent.stores.ledger import Ledger, LedgerRefund
from worker.runner import prepare_stores


@dataclass(frozen=True)
class SharedDatabase:
    env: dict[str, str]  # on top of each process's own settings
    data_dir: Path  # the test's own (the reader's): nothing in it is shared

    def settings(self) -> AgentSettings:
        return AgentSettings(
            _env_file=None,
            data_dir=self.data_dir,
            DATABASE_URL=SecretStr(self.env["DATABASE_URL"]),
        )

    async def place_order(self, like: SeedOrder) -> OrderDetails:
        """A new order like `like`, paid at the ledger (as `refund-bot demo` places one)."""
        domain, _, ledger = await prepare_stores(self.settings())
        order = await domain.place_order(like)
        await ledger.seed_payments([(order.payment_ref, order.amount_cents, "usd")])
        return order

    async def refunds_for(self, workflow_id: str) -> list[LedgerRefund]:
        return await Ledger(database_for(self.settings())).refunds_for_workflow(workflow_id)


def shared_database_at(tmp_path: Path, url: str) -> SharedDatabase:
    return SharedDatabase(env={"DATABASE_URL": url}, data_dir=tmp_path / "reader")

"""The one database every process of a multi-process test shares, and what a test reads from it.

    shared_database fixture -> SharedDatabase.env (each process's settings) -> the processes
    the test -> place_order (the demo world) ... refunds_for (the ledger: the owner's answer)

INTEGRATION POINT (issue 12, stores half): until `DATABASE_URL` lands this shares one data
directory between the processes (their SQLite files), which proves the processes' half on one
host only. Once it lands, `env` becomes {"DATABASE_URL": <the suite's PostgreSQL server>} and the
two readers go through the store interface; each process then keeps a DATA_DIR of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.models import OrderDetails
from agent.settings import AgentSettings
from agent.stores.domain import SeedOrder
from agent.stores.ledger import Ledger, LedgerRefund
from worker.runner import prepare_stores


@dataclass(frozen=True)
class SharedDatabase:
    env: dict[str, str]  # on top of each process's own settings
    data_dir: Path

    def settings(self) -> AgentSettings:
        return AgentSettings(_env_file=None, data_dir=self.data_dir)  # type: ignore[call-arg]

    async def place_order(self, like: SeedOrder) -> OrderDetails:
        """A new order like `like`, paid at the ledger (as `refund-bot demo` places one)."""
        domain, _, ledger = await prepare_stores(self.settings())
        order = await domain.place_order(like)
        await ledger.seed_payments([(order.payment_ref, order.amount_cents, "usd")])
        return order

    async def refunds_for(self, workflow_id: str) -> list[LedgerRefund]:
        return await Ledger(self.settings().ledger_db).refunds_for_workflow(workflow_id)


def shared_database_at(tmp_path: Path) -> SharedDatabase:
    data_dir = tmp_path / "shared"
    return SharedDatabase(env={"DATA_DIR": str(data_dir)}, data_dir=data_dir)

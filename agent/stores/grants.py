"""The authorization store: who holds which role, up to which amount, granted and revoked when.

This is authorization state. It is read live, right before every refund, and never cached in
workflow state: a grant remembered from an earlier turn may have been revoked since.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from agent.models import AGENT_PRINCIPAL, Actor, Role
from agent.stores.db import open_db

SCHEMA = """
CREATE TABLE IF NOT EXISTS grants (
    grant_id INTEGER PRIMARY KEY AUTOINCREMENT,
    platform TEXT NOT NULL,
    user_id TEXT NOT NULL,
    role TEXT NOT NULL,
    limit_cents INTEGER,
    granted_at TEXT NOT NULL,
    granted_by TEXT NOT NULL,
    revoked_at TEXT,
    revoked_by TEXT
);
CREATE INDEX IF NOT EXISTS grants_live ON grants (platform, user_id, role, revoked_at);
"""

# The agent's own limit: refunds up to $100.00 clear without a human (the policy's threshold too).
AGENT_REFUND_LIMIT_CENTS = 10000

# The terminal support channel's demo staff: a support agent who may approve up to $1,000.00 and a
# presenter who runs the demo commands and administers grants.
SEED_GRANTS: tuple[tuple[Actor, Role, int | None], ...] = (
    (AGENT_PRINCIPAL, "refund_agent", AGENT_REFUND_LIMIT_CENTS),
    (Actor(platform="local", user_id="support"), "refund_approver", 100000),
    (Actor(platform="local", user_id="presenter"), "presenter", None),
    (Actor(platform="local", user_id="presenter"), "admin", None),
)


class Grant(BaseModel):
    grant_id: int
    platform: str
    user_id: str
    role: Role
    limit_cents: int | None
    granted_at: str
    granted_by: str
    revoked_at: str | None = None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def principal_key(actor: Actor) -> str:
    return f"{actor.platform}:{actor.user_id}"


class GrantStore:
    def __init__(self, path: Path) -> None:
        self._path = path

    async def seed(self, extra: tuple[tuple[Actor, Role, int | None], ...] = ()) -> None:
        """Give the seed principals their grants once; a revoked seed grant stays revoked."""
        async with open_db(self._path, SCHEMA) as db:
            for actor, role, limit in SEED_GRANTS + extra:
                cursor = await db.execute(
                    "SELECT 1 FROM grants WHERE platform = ? AND user_id = ? AND role = ?",
                    (actor.platform, actor.user_id, role),
                )
                if await cursor.fetchone() is None:
                    await db.execute(
                        "INSERT INTO grants (platform, user_id, role, limit_cents, granted_at, "
                        "granted_by) VALUES (?, ?, ?, ?, ?, 'seed')",
                        (actor.platform, actor.user_id, role, limit, _now()),
                    )
            await db.commit()

    async def grant(self, actor: Actor, role: Role, limit_cents: int | None, by: Actor) -> Grant:
        """Grant a role. An earlier live grant of the same role is replaced (revoked, then new)."""
        async with open_db(self._path, SCHEMA) as db:
            now = _now()
            await db.execute(
                "UPDATE grants SET revoked_at = ?, revoked_by = ? WHERE platform = ? AND "
                "user_id = ? AND role = ? AND revoked_at IS NULL",
                (now, principal_key(by), actor.platform, actor.user_id, role),
            )
            cursor = await db.execute(
                "INSERT INTO grants (platform, user_id, role, limit_cents, granted_at, granted_by) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (actor.platform, actor.user_id, role, limit_cents, now, principal_key(by)),
            )
            grant_id = cursor.lastrowid
            await db.commit()
        return Grant(
            grant_id=int(grant_id or 0),
            platform=actor.platform,
            user_id=actor.user_id,
            role=role,
            limit_cents=limit_cents,
            granted_at=now,
            granted_by=principal_key(by),
        )

    async def revoke(self, actor: Actor, role: Role, by: Actor) -> int:
        """Revoke every live grant of `role` for `actor`; returns how many were live."""
        async with open_db(self._path, SCHEMA) as db:
            cursor = await db.execute(
                "UPDATE grants SET revoked_at = ?, revoked_by = ? WHERE platform = ? AND "
                "user_id = ? AND role = ? AND revoked_at IS NULL",
                (_now(), principal_key(by), actor.platform, actor.user_id, role),
            )
            await db.commit()
            return cursor.rowcount

    async def live_grant(self, actor: Actor, role: Role) -> Grant | None:
        async with open_db(self._path, SCHEMA) as db:
            cursor = await db.execute(
                "SELECT * FROM grants WHERE platform = ? AND user_id = ? AND role = ? AND "
                "revoked_at IS NULL ORDER BY grant_id DESC LIMIT 1",
                (actor.platform, actor.user_id, role),
            )
            row = await cursor.fetchone()
        return Grant(**dict(row)) if row is not None else None

    async def live_grants(self) -> list[Grant]:
        async with open_db(self._path, SCHEMA) as db:
            cursor = await db.execute(
                "SELECT * FROM grants WHERE revoked_at IS NULL ORDER BY platform, user_id, role"
            )
            return [Grant(**dict(row)) for row in await cursor.fetchall()]

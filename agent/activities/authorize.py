"""authorize_refund: reads the live role grants right before every refund.

Authorization is state owned by the authorization system. The Workflow never caches a grant: a
grant that existed at the click may be revoked by the time of the refund, and this read decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from temporalio import activity

from agent.activities.metrics import count
from agent.models import Actor, AuthorizationDecision, AuthorizeInput, Role
from agent.stores.grants import Grant, GrantStore


class GrantSource(Protocol):
    """Answers "does this actor hold this role right now?", read live at every call."""

    async def live_grant(self, actor: Actor, role: Role) -> Grant | None: ...


def _money(cents: int | None) -> str:
    return "no limit" if cents is None else f"${cents / 100:,.2f}"


class AuthorizeActivities:
    def __init__(
        self, store: GrantStore, platform_sources: Mapping[str, GrantSource] | None = None
    ):
        # A platform may bring its own live source (a Slack user group, a Discord role); the grants
        # store answers for everyone else, the agent's own service principal included.
        self._store = store
        self._sources = dict(platform_sources or {})

    @activity.defn
    async def authorize_refund(self, request: AuthorizeInput) -> AuthorizationDecision:
        source = self._sources.get(request.principal.platform, self._store)
        grant = await source.live_grant(request.principal, request.role)  # AUTHORIZATION STATE
        who = request.principal.label
        if grant is None:
            count("refusals", reason="not_authorized")
            return AuthorizationDecision(
                allowed=False,
                principal=request.principal,
                role=request.role,
                reason=f"{who} holds no live {request.role} grant",
            )
        if grant.limit_cents is not None and request.amount_cents > grant.limit_cents:
            count("refusals", reason="not_authorized")
            return AuthorizationDecision(
                allowed=False,
                principal=request.principal,
                role=request.role,
                grant_id=grant.grant_id,
                limit_cents=grant.limit_cents,
                reason=(
                    f"{_money(request.amount_cents)} is above {who}'s {request.role} limit of "
                    f"{_money(grant.limit_cents)}"
                ),
            )
        return AuthorizationDecision(
            allowed=True,
            principal=request.principal,
            role=request.role,
            grant_id=grant.grant_id,
            limit_cents=grant.limit_cents,
            reason=f"{who} holds {request.role} (limit {_money(grant.limit_cents)})",
        )

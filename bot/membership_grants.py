"""Grant sources where membership of a platform group makes a refund approver, read live.

A Slack user group or a Discord guild role can own the refund_approver fact for that platform's
users: whoever is a member right now may approve, up to the configured limit. Membership is asked
of the platform at every call (no cache), so removing someone there stops the very next refund.
Every other role (presenter, admin, the agent's refund_agent), every other platform's actor, and
everything when no group is configured, is answered by the fallback: the grants store.

MembershipGrants holds that shared part; a platform subclass only says how to ask "is this user
a member right now?" (bot.slack.grants, bot.discord.grants). It implements the GrantSource
protocol of agent.activities.authorize and serves both processes: the Worker's authorize_refund
(platform_sources={platform: ...}) and the bot's pre-check on an Approve / Deny click.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import UTC, datetime

from agent.activities.authorize import GrantSource
from agent.models import Actor, Role
from agent.stores.grants import Grant

APPROVER_ROLE: Role = "refund_approver"


class MembershipGrants(ABC):
    """refund_approver from membership of `group` on `platform`; every other question to `fallback`.

    `group` is None when none is configured; then the fallback answers everything.
    `granted_by_kind` names the kind of group in Grant.granted_by, e.g. "slack-usergroup".
    """

    def __init__(
        self,
        fallback: GrantSource,
        *,
        platform: str,
        group: str | None,
        limit_cents: int | None,
        granted_by_kind: str,
    ) -> None:
        self._fallback = fallback
        self._platform = platform
        self._group = group
        self._limit = limit_cents
        self._granted_by = f"{granted_by_kind}:{group}"

    async def live_grant(self, actor: Actor, role: Role) -> Grant | None:
        if self._group is None or role != APPROVER_ROLE or actor.platform != self._platform:
            return await self._fallback.live_grant(actor, role)
        # AUTHORIZATION STATE: the group's members as the platform holds them now. The group owns
        # this fact: a grants-store row does not add an approver here.
        grant_id = await self._membership(actor.user_id)
        if grant_id is None:
            return None
        return Grant(
            grant_id=grant_id,  # the group grants it; there is no store row
            platform=self._platform,
            user_id=actor.user_id,
            role=APPROVER_ROLE,
            limit_cents=self._limit,
            granted_at=datetime.now(UTC).isoformat(timespec="seconds"),  # read at, not given at
            granted_by=self._granted_by,
        )

    @abstractmethod
    async def _membership(self, user_id: str) -> int | None:
        """None unless `user_id` is a member of the group right now; else the Grant's grant_id.

        The grant id names what granted it where the platform has a numeric id (a Discord role);
        0 otherwise. Raise to have the caller retry (a rate limit, an outage); return None to
        fail closed (the group is gone, a scope is missing).
        """

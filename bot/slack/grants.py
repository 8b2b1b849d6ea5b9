"""A live grant source from Slack: membership of a user group makes a refund approver.

With SLACK_APPROVER_GROUP set (a user-group id, S…), the group owns the refund_approver fact for
Slack users: whoever is a member right now may approve, up to SLACK_APPROVER_GROUP_LIMIT_CENTS.
Membership is read at every call (usergroups.users.list, no cache), so removing someone from the
group in Slack stops the very next refund. Every other role (presenter, admin, the agent's
refund_agent) and every non-Slack actor is answered by the fallback, the grants store.

It implements the GrantSource protocol of agent.activities.authorize and serves both processes:
the Worker's authorize_refund (platform_sources={"slack": ...}) and the app's click pre-check.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.activities.authorize import GrantSource
from agent.models import Actor, Role
from agent.stores.grants import Grant
from bot.slack.outbound import TRANSIENT_SLACK_ERRORS
from bot.slack.settings import SlackSettings

log = logging.getLogger(__name__)

GROUP_ROLE: Role = "refund_approver"
# Grants from the group have no row in the grants store; 0 says so in AuthorizationDecision.
GROUP_GRANT_ID = 0


class SlackUserGroupGrants:
    """refund_approver from SLACK_APPROVER_GROUP membership; every other question to `fallback`."""

    def __init__(
        self,
        settings: SlackSettings,
        fallback: GrantSource,
        *,
        client: AsyncWebClient | None = None,
    ) -> None:
        self._group = settings.approver_group.strip() if settings.approver_group else None
        if client is None and self._group is not None:
            if settings.bot_token is None:
                raise ValueError("SLACK_APPROVER_GROUP needs SLACK_BOT_TOKEN to read the group")
            client = AsyncWebClient(
                token=settings.bot_token.get_secret_value(), base_url=settings.api_url
            )
        self._client = client
        self._limit = settings.approver_group_limit_cents
        self._fallback = fallback

    @property
    def group(self) -> str | None:
        """The configured user group, or None when the grants store decides."""
        return self._group

    async def live_grant(self, actor: Actor, role: Role) -> Grant | None:
        if self._group is None or role != GROUP_ROLE or actor.platform != "slack":
            return await self._fallback.live_grant(actor, role)
        # AUTHORIZATION STATE: the group's members as Slack holds them now.
        if not await self._is_member(actor.user_id):
            return None
        return Grant(
            grant_id=GROUP_GRANT_ID,  # the group grants it; there is no store row
            platform="slack",
            user_id=actor.user_id,
            role=role,
            limit_cents=self._limit,
            granted_at=datetime.now(UTC).isoformat(timespec="seconds"),  # read at, not given at
            granted_by=f"slack-usergroup:{self._group}",
        )

    async def _is_member(self, user_id: str) -> bool:
        assert self._group is not None and self._client is not None
        try:
            response = await self._client.usergroups_users_list(
                usergroup=self._group, include_disabled=False
            )
        except SlackApiError as err:
            code = str(err.response.get("error") or f"http_{err.response.status_code}")
            if err.response.status_code == 429 or err.response.status_code >= 500:
                raise  # the Activity fails and Temporal retries it
            if code in TRANSIENT_SLACK_ERRORS:
                raise
            # Configuration errors (no_such_subteam, missing_scope, invalid_auth) fail closed:
            # nobody approves through the group, said loudly in the log.
            log.error("cannot read Slack user group %s: %s", self._group, code)
            return False
        return user_id in (response.get("users") or [])

"""A live grant source from Slack: membership of a user group makes a refund approver.

With SLACK_APPROVER_GROUP set (a user-group id, S…), the group owns the refund_approver fact for
Slack users, up to SLACK_APPROVER_GROUP_LIMIT_CENTS. The shared rules (what the group answers,
what the fallback answers, the Grant it builds) are bot.membership_grants'; this module only asks
Slack who is in the group right now (usergroups.users.list, no cache).
"""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.activities.authorize import GrantSource
from bot.membership_grants import MembershipGrants
from bot.slack.outbound import is_transient, slack_error_code
from bot.slack.settings import SlackSettings
from bot.slack.web_client import KeptAliveWebClient

log = logging.getLogger(__name__)

# Grants from the group have no row in the grants store; 0 says so in AuthorizationDecision.
GROUP_GRANT_ID = 0


class SlackUserGroupGrants(MembershipGrants):
    """refund_approver from SLACK_APPROVER_GROUP membership; every other question to `fallback`."""

    def __init__(
        self,
        settings: SlackSettings,
        fallback: GrantSource,
        *,
        client: AsyncWebClient | None = None,
    ) -> None:
        group = settings.approver_group.strip() if settings.approver_group else None
        self._own_client: KeptAliveWebClient | None = None
        if client is None and group is not None:
            if settings.bot_token is None:
                raise ValueError("SLACK_APPROVER_GROUP needs SLACK_BOT_TOKEN to read the group")
            # Kept alive: the group is read before every refund a Slack user approves.
            client = self._own_client = KeptAliveWebClient(
                token=settings.bot_token.get_secret_value(), base_url=settings.api_url
            )
        super().__init__(
            fallback,
            platform="slack",
            group=group,
            limit_cents=settings.approver_group_limit_cents,
            granted_by_kind="slack-usergroup",
        )
        self._client = client

    @property
    def group(self) -> str | None:
        """The configured user group, or None when the grants store decides."""
        return self._group

    async def close(self) -> None:
        """Close the connections of the client this source built itself (a given one is left)."""
        if self._own_client is not None:
            await self._own_client.close()

    async def _membership(self, user_id: str) -> int | None:
        assert self._group is not None and self._client is not None
        try:
            response = await self._client.usergroups_users_list(
                usergroup=self._group, include_disabled=False
            )
        except SlackApiError as err:
            if is_transient(err):
                raise  # the Activity fails and Temporal retries it
            # Configuration errors (no_such_subteam, missing_scope, invalid_auth) fail closed:
            # nobody approves through the group, said loudly in the log.
            log.error("cannot read Slack user group %s: %s", self._group, slack_error_code(err))
            return None
        return GROUP_GRANT_ID if user_id in (response.get("users") or []) else None

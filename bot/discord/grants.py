"""DiscordRoleGrants: "may approve refunds" read from a Discord guild role, live.

With DISCORD_APPROVER_ROLE set (a role's id, or its name; all digits is read as an id), the
guild owns the refund_approver fact for Discord users, up to DISCORD_APPROVER_ROLE_LIMIT_CENTS.
The shared rules (what the role answers, what the fallback answers, the Grant it builds) are
bot.membership_grants'; this module only asks Discord whether a member holds the role right now.
The member's roles are read over REST at every call (GET /guilds/{guild}/members/{user}), never
from the gateway's member cache, so a role removed a second ago counts as removed.

In the Worker it logs in over REST on first use; in the bot it may share the gateway client's
HTTPClient instead.
"""

from __future__ import annotations

import asyncio
import logging

import discord
from discord.http import HTTPClient

from agent.activities.authorize import GrantSource
from bot.discord.outbound import RoutedHTTPClient
from bot.discord.settings import DiscordSettings
from bot.membership_grants import MembershipGrants

log = logging.getLogger(__name__)


class DiscordRoleGrants(MembershipGrants):
    """refund_approver from DISCORD_APPROVER_ROLE; every other question to `fallback`."""

    def __init__(
        self,
        settings: DiscordSettings,
        fallback: GrantSource,
        *,
        http: HTTPClient | None = None,
    ) -> None:
        role = settings.approver_role.strip() if settings.approver_role else None
        super().__init__(
            fallback,
            platform="discord",
            group=role,
            limit_cents=settings.approver_role_limit_cents,
            granted_by_kind="discord-role",
        )
        self._guild_id = settings.guild_id
        if role is not None and self._guild_id is None:
            # The Actor carries no guild, so the role's guild must come from settings.
            raise ValueError("DISCORD_APPROVER_ROLE needs DISCORD_GUILD_ID (the role's server)")
        if role is not None and http is None and settings.token is None:
            raise ValueError("DISCORD_APPROVER_ROLE needs DISCORD_TOKEN to read members' roles")
        self._settings = settings
        self._http = http
        self._owns_http = http is None
        self._login_lock = asyncio.Lock()

    @property
    def role(self) -> str | None:
        """The configured approver role (id or name), or None when the store decides."""
        return self._group

    async def _membership(self, user_id: str) -> int | None:
        """The id of the approver role if the member holds it now (it is the grant id), or None."""
        assert self._guild_id is not None
        try:
            http = await self._client()
            member = await http.get_member(self._guild_id, int(user_id))
            return await self._matching_role(http, {int(r) for r in member.get("roles", [])})
        except discord.NotFound:
            return None  # not (or no longer) a member of the guild
        except ValueError:
            return None  # a user id that is no snowflake cannot be a member
        except (discord.Forbidden, discord.LoginFailure) as err:
            # No retry can fix a refused token or a missing permission: fail closed (nobody
            # approves through the role), said loudly in the log. 5xx, 429 and network errors
            # propagate: the step is retried, then waited out (agent/workflow.py).
            log.error("cannot read Discord role %s: %s", self._group, type(err).__name__)
            return None

    async def _matching_role(self, http: HTTPClient, held: set[int]) -> int | None:
        role = self._group
        assert role is not None and self._guild_id is not None
        if role.isdigit():  # all digits: a role id (Developer Mode > Copy Role ID)
            return int(role) if int(role) in held else None
        # A name: look the guild's roles up now, so a renamed role stops matching at once. Names
        # are not unique in Discord; any role of that name counts, which is why an id is better.
        roles = await http.get_roles(self._guild_id)  # discord.types.role.Role payloads
        for guild_role in roles:
            if guild_role["name"] == role and int(guild_role["id"]) in held:
                return int(guild_role["id"])
        return None

    async def _client(self) -> HTTPClient:
        if self._http is not None:
            return self._http
        async with self._login_lock:
            if self._http is None:
                assert self._settings.token is not None
                http = RoutedHTTPClient(
                    asyncio.get_running_loop(),
                    base_url=self._settings.api_url,
                    max_ratelimit_timeout=None,
                )
                try:
                    await http.static_login(self._settings.token.get_secret_value())
                except BaseException:
                    await http.close()
                    raise
                self._http = http
        return self._http

    async def close(self) -> None:
        """Close the REST session this source opened itself (a shared one is left alone)."""
        http, self._http = self._http, None
        if http is not None and self._owns_http:
            await http.close()

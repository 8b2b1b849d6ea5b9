"""DiscordRoleGrants: "may approve refunds" read from a Discord guild role, live.

With DISCORD_APPROVER_ROLE set (a role's id, or its name; all digits is read as an id), the
guild owns the refund_approver fact for Discord users: whoever holds that role right now may
approve, up to DISCORD_APPROVER_ROLE_LIMIT_CENTS. The member's roles are read over REST at every
call (GET /guilds/{guild}/members/{user}), never from the gateway's member cache, so a role removed
a second ago counts as removed. Every other role (presenter, admin, the agent's refund_agent) and
every non-Discord actor is answered by the fallback source, the grants store.

It serves both processes: the Worker's authorize_refund (platform_sources={"discord": ...}) and the
bot's pre-check on a button click. In the Worker it logs in over REST on first use; in the bot it
may share the gateway client's HTTPClient instead.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import discord
from discord.http import HTTPClient

from agent.activities.authorize import GrantSource
from agent.models import Actor, Role
from agent.stores.grants import Grant
from bot.discord.outbound import RoutedHTTPClient
from bot.discord.settings import DiscordSettings

log = logging.getLogger(__name__)

ROLE_GRANTED: Role = "refund_approver"


class DiscordRoleGrants:
    """Implements agent.activities.authorize.GrantSource."""

    def __init__(
        self,
        settings: DiscordSettings,
        fallback: GrantSource,
        *,
        http: HTTPClient | None = None,
    ) -> None:
        self._fallback = fallback
        self._role = settings.approver_role.strip() if settings.approver_role else None
        self._limit = settings.approver_role_limit_cents
        self._guild_id = settings.guild_id
        if self._role is not None and self._guild_id is None:
            # The Actor carries no guild, so the role's guild must come from settings.
            raise ValueError("DISCORD_APPROVER_ROLE needs DISCORD_GUILD_ID (the role's server)")
        if self._role is not None and http is None and settings.token is None:
            raise ValueError("DISCORD_APPROVER_ROLE needs DISCORD_TOKEN to read members' roles")
        self._settings = settings
        self._http = http
        self._owns_http = http is None
        self._login_lock = asyncio.Lock()

    @property
    def role(self) -> str | None:
        """The configured approver role (id or name), or None when the store decides."""
        return self._role

    async def live_grant(self, actor: Actor, role: Role) -> Grant | None:
        if self._role is None or role != ROLE_GRANTED or actor.platform != "discord":
            return await self._fallback.live_grant(actor, role)
        assert self._guild_id is not None
        http = await self._client()
        # AUTHORIZATION STATE: the member's roles as Discord holds them now.
        try:
            member = await http.get_member(self._guild_id, int(actor.user_id))
        except discord.NotFound:
            return None  # not (or no longer) a member of the guild
        except ValueError:
            return None  # a user id that is no snowflake cannot be a member
        role_id = await self._matching_role(http, {int(r) for r in member.get("roles", [])})
        if role_id is None:
            return None
        return Grant(
            grant_id=role_id,  # the role that grants it; there is no store row
            platform="discord",
            user_id=actor.user_id,
            role=ROLE_GRANTED,
            limit_cents=self._limit,
            granted_at=datetime.now(UTC).isoformat(timespec="seconds"),  # read at, not given at
            granted_by=f"discord-role:{self._role}",
        )

    async def _matching_role(self, http: HTTPClient, held: set[int]) -> int | None:
        assert self._role is not None and self._guild_id is not None
        if self._role.isdigit():  # all digits: a role id (Developer Mode > Copy Role ID)
            return int(self._role) if int(self._role) in held else None
        # A name: look the guild's roles up now, so a renamed role stops matching at once. Names
        # are not unique in Discord; any role of that name counts, which is why an id is better.
        roles: list[dict[str, Any]] = await http.get_roles(self._guild_id)
        for role in roles:
            if role["name"] == self._role and int(role["id"]) in held:
                return int(role["id"])
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

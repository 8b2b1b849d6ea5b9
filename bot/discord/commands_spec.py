"""The Discord application commands: manifests/discord-commands.json, and registering it.

The manifest is the one source of truth. It is Discord's own application command JSON (the body of
a bulk overwrite), so `sync_commands` sends it as it is, and slash_commands builds its discord.py
commands from it: names, descriptions and choices come from the manifest, and `mismatches` checks
that the handlers' parameters (types, required) agree with it, so the two cannot drift apart.

Registering is a bulk overwrite (PUT): it replaces the application's whole set, so a command removed
from the manifest disappears from Discord too. Guild commands (DISCORD_GUILD_ID) show up at once;
global ones may take up to an hour to reach every client.
"""

from __future__ import annotations

import asyncio
import json
import logging
from functools import cache
from pathlib import Path
from typing import Any

from discord import app_commands
from discord.http import HTTPClient

from bot.discord.outbound import RoutedHTTPClient
from bot.discord.settings import DiscordSettings

log = logging.getLogger(__name__)

# manifests/ sits at the repository root, next to the packages.
MANIFEST_PATH = Path(__file__).resolve().parents[2] / "manifests" / "discord-commands.json"

# What Discord assumes for a key a command leaves out; compared with these filled in.
_COMMAND_DEFAULTS: dict[str, Any] = {
    "type": 1,
    "options": [],
    "default_member_permissions": None,
    "nsfw": False,
    "contexts": None,
    "integration_types": [0],
}
_OPTION_DEFAULTS: dict[str, Any] = {"required": False}


@cache
def load_manifest(path: Path = MANIFEST_PATH) -> tuple[dict[str, Any], ...]:
    """The command definitions, as Discord's JSON. Cached: read once per process."""
    commands = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(commands, list) or not all(isinstance(c, dict) for c in commands):
        raise ValueError(f"{path} must hold a JSON list of application commands")
    return tuple(commands)


def command_spec(name: str, manifest: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """One command's definition from the manifest, by name."""
    for command in manifest:
        if command["name"] == name:
            return command
    raise KeyError(f"/{name} is not in {MANIFEST_PATH.name}")


def normalized(command: dict[str, Any]) -> dict[str, Any]:
    """A command's JSON with Discord's defaults filled in and keys Discord ignores left out."""
    out = {key: command.get(key, default) for key, default in _COMMAND_DEFAULTS.items()}
    out["name"] = command["name"]
    out["description"] = command.get("description", "")
    out["options"] = [
        {**_OPTION_DEFAULTS, **{k: v for k, v in option.items() if v is not None}}
        for option in command.get("options") or []
    ]
    return out


def mismatches(tree: app_commands.CommandTree, manifest: tuple[dict[str, Any], ...]) -> list[str]:
    """How the tree's commands differ from the manifest; empty when they agree."""
    built = {c.name: normalized(c.to_dict(tree)) for c in tree.get_commands()}
    wanted = {c["name"]: normalized(c) for c in manifest}
    problems = [f"/{name} is in the manifest only" for name in wanted.keys() - built.keys()]
    problems += [f"/{name} is in the client only" for name in built.keys() - wanted.keys()]
    for name in sorted(wanted.keys() & built.keys()):
        for key, value in wanted[name].items():
            if built[name][key] != value:
                problems.append(f"/{name} {key}: manifest {value!r}, client {built[name][key]!r}")
    return problems


async def register_commands(
    http: HTTPClient,
    application_id: int,
    guild_id: int | None,
    manifest: tuple[dict[str, Any], ...] | None = None,
) -> list[str]:
    """Bulk-overwrite the application's commands (guild ones when `guild_id` is set)."""
    payload = list(manifest if manifest is not None else load_manifest())
    if guild_id is not None:
        registered = await http.bulk_upsert_guild_commands(application_id, guild_id, payload)
    else:
        registered = await http.bulk_upsert_global_commands(application_id, payload)
    return [command["name"] for command in registered]


async def sync_commands(settings: DiscordSettings) -> list[str]:
    """`refund-bot discord sync-commands`: register the manifest over REST, no gateway needed.

    Returns the names Discord registered. Raises discord.LoginFailure for a bad token and
    discord.Forbidden when the bot was invited without the applications.commands scope.
    """
    if settings.token is None:
        raise ValueError("DISCORD_TOKEN is not set: Discord is not configured")
    http = RoutedHTTPClient(
        asyncio.get_running_loop(), base_url=settings.api_url, max_ratelimit_timeout=None
    )
    try:
        await http.static_login(settings.token.get_secret_value())
        # The application's id, not the bot user's: the two differ for applications made before
        # bot users shared their application's id.
        application = await http.application_info()
        names = await register_commands(http, int(application["id"]), settings.guild_id)
    finally:
        await http.close()
    where = f"guild {settings.guild_id}" if settings.guild_id else "every guild (global)"
    log.info("registered Discord commands in %s: %s", where, ", ".join(names))
    return names

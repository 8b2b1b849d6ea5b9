"""One Discord gateway connection per token, enforced: two real `refund-bot bot` processes with one
DISCORD_TOKEN on one shared database, against the fake Discord API and gateway.

    bot-1 connects (it holds the lease) -> bot-2 is refused in one line and stands by (/healthz 200)
    bot-1 SIGKILLed (no release) -> its lease expires -> bot-2 connects: one gateway all along
"""

from __future__ import annotations

import signal
from pathlib import Path

import aiohttp
from temporalio.testing import WorkflowEnvironment

from harness import free_port
from harness.cli_process import RefundBotProcess, clean_environment
from harness.codec import TEST_CODEC_ENV
from harness.conditions import wait_for
from harness.fakes.discord_api import FakeDiscordAPI
from tests.support.discord_guild import GUILD, SUPPORT, seed_guild
from tests.support.shared_database import SharedDatabase

LEASE = 3  # seconds: a crashed holder's successor connects within about this long
STARTUP = 120.0


async def test_a_second_bot_on_the_same_token_stands_by_and_takes_over_when_the_first_dies(
    temporal_env: WorkflowEnvironment, shared_database: SharedDatabase, tmp_path: Path
) -> None:
    async with FakeDiscordAPI() as api, aiohttp.ClientSession() as http:
        seed_guild(api)

        def env(host: str, ops: str) -> dict[str, str]:
            own = {"DATA_DIR": str(tmp_path / host), **shared_database.env}
            return clean_environment(
                **TEST_CODEC_ENV,
                **own,
                TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
                DISCORD_TOKEN=api.token,
                DISCORD_SUPPORT_CHANNEL_ID=str(SUPPORT),
                DISCORD_GUILD_ID=str(GUILD),
                DISCORD_API_URL=api.api_url,
                DISCORD_GATEWAY_URL=api.gateway_url,
                DISCORD_GATEWAY_LEASE_SECONDS=str(LEASE),
                REFUND_BOT_HOST=host,
                METRICS_ADDRESS=ops,
            )

        first = await RefundBotProcess.start(["bot"], env("bot-1", "off"), tmp_path)
        second_ops = f"127.0.0.1:{free_port()}"
        second: RefundBotProcess | None = None
        try:
            await wait_for(
                lambda: api.gateway.connected == 1, timeout=STARTUP, what="bot-1 on the gateway"
            )
            second = await RefundBotProcess.start(["bot"], env("bot-2", second_ops), tmp_path)
            refused = await second.expect(
                rf"discord: not connecting: the gateway of this DISCORD_TOKEN is held by pid "
                rf"{first.pid} on bot-1 \(renewed \d+ s ago\); Discord allows one connection per "
                r"token, so this process stands by and takes over if that one stops",
                timeout=STARTUP,
            )
            assert api.token not in second.output

            async def standing_by() -> dict | None:
                async with http.get(f"http://{second_ops}/healthz") as resp:
                    body = await resp.json()
                    ok = resp.status == 200 and body["platforms"]["discord"]["state"] == "standby"
                    return body if ok else None

            body = await wait_for(standing_by, timeout=STARTUP, what="bot-2 healthy on standby")
            assert (
                body["platforms"]["discord"]["detail"]
                == f"gateway held by pid {first.pid} on bot-1"
            )
            assert len(api.gateway.identifies) == 1 and api.gateway.connected == 1

            first.send(signal.SIGKILL)  # no release: only the lease's expiry frees the gateway
            await second.expect(rf"discord: took over the gateway from pid {first.pid} on bot-1")
            await wait_for(
                lambda: api.gateway.connected == 1 and len(api.gateway.identifies) == 2,
                timeout=STARTUP,
                what="bot-2 on the gateway",
            )
            assert second.output.count("not connecting") == 1  # one line, not one per check
            assert refused is not None
            assert await second.stop(signal.SIGTERM) == 0, second.output
            assert "Traceback" not in second.output
        finally:
            await first.close()
            if second is not None:
                await second.close()

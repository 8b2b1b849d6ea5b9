"""The Workers bench.turn_latency times, in a process of their own (as a deployment's Worker is).

    python -m bench.turn_workers --address HOST:PORT --data-dir DIR --queue PREFIX
      -> PREFIX-encrypted | PREFIX-plain | PREFIX-no-op-codec: refund-bot's Worker
         (worker.runner.build_worker, the one `refund-bot worker` runs) with that data converter
      -> PREFIX-bare: bench.round_trip's workflow and Activity
      -> prints "ready" once every Worker runs; stops on SIGTERM or when its parent is gone

With an OTEL_* variable set, this process is traced as a refund-bot Worker is (agent.tracing), its
clients carrying the tracing interceptor: bench.tracing_cost runs it both ways.

The converters: the one every refund-bot process uses (AES-GCM payload codec), the plain pydantic
converter (no codec), and a codec that changes nothing (the SDK's codec plumbing alone: with any
codec set it walks every activation and completion for payloads).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.worker import Worker

from agent import tracing
from agent.settings import AgentSettings
from agent.stores.sqlite import SqliteDatabase
from bench.round_trip import BareRoundTrip, echo
from bot.local.thread_store import LocalThreadStore
from harness.codec import TEST_CONVERTER
from worker.exit import exit_now
from worker.lifecycle import spawn_child, terminate, until_stopped, watch_lifeline
from worker.runner import build_worker

BARE = "bare"


class Unchanged(PayloadCodec):
    """A codec that returns what it is given: the SDK's codec path, without any encryption."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


CONVERTERS: dict[str, DataConverter] = {
    "encrypted": TEST_CONVERTER,
    "plain": pydantic_data_converter,
    "no-op codec": dataclasses.replace(pydantic_data_converter, payload_codec=Unchanged()),
}


@contextlib.asynccontextmanager
async def turn_workers(address: str, data_dir: Path, prefix: str) -> AsyncIterator[None]:
    """This module's Workers in a process of their own, polling once this yields; stopped after."""
    workers = await spawn_child(
        [sys.executable, "-m", "bench.turn_workers", "--address", address,
         "--data-dir", str(data_dir), "--queue", prefix],
        on_parent_death=signal.SIGTERM,
        lifeline=True,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert workers.stdout is not None
        line = await asyncio.wait_for(workers.stdout.readline(), 120)
        if line.strip() != b"ready":
            raise RuntimeError(f"bench.turn_workers did not start: {line!r}")
        yield
    finally:
        await terminate(workers, grace=10)


def queue(prefix: str, name: str) -> str:
    return f"{prefix}-{name.replace(' ', '-')}"


def local_threads(data_dir: Path) -> LocalThreadStore:
    """The local channel's threads in `data_dir`: the Workers post there, the driver reads."""
    return LocalThreadStore(SqliteDatabase(data_dir))


async def serve(address: str, data_dir: Path, prefix: str) -> None:
    watch_lifeline()
    tracing.configure("worker")
    settings = AgentSettings(_env_file=None, data_dir=data_dir)
    posters = {"local": local_threads(data_dir)}
    async with contextlib.AsyncExitStack() as workers:
        for name, converter in CONVERTERS.items():
            client = await Client.connect(
                address, data_converter=converter, interceptors=tracing.interceptors()
            )
            worker = await build_worker(client, queue(prefix, name), settings, posters)
            await workers.enter_async_context(worker)
        bare = await Client.connect(address, data_converter=pydantic_data_converter)
        await workers.enter_async_context(
            Worker(bare, task_queue=queue(prefix, BARE), workflows=[BareRoundTrip],
                   activities=[echo])
        )  # fmt: skip
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--queue", required=True)
    args = parser.parse_args()
    asyncio.run(until_stopped(serve(args.address, args.data_dir, args.queue)))
    exit_now(0)

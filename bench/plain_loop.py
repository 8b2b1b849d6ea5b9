"""refund-bot's agent as a plain in-process loop (demo/plain_loop.py) in the local channel.

    python -m bench.plain_loop --data-dir D --thread T --customer ID --opening TEXT
        [--crash-after K] --calls FILE
      -> the loop, the customer's replies read from the local thread; SIGKILL after step K

What bench.crash_cost compares refund-bot with: the docs page's Demo 1. A new process starts the
conversation over from the opening, as a plain service would. --crash-after K SIGKILLs this process
once its K-th step has returned. Each step's name is appended to --calls before it runs, so the
calls made read off the file afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from agent.models import Actor, ThreadRef
from agent.settings import AgentSettings
from demo.plain_loop import CustomerLine, PlainLoop, loop_parts
from refund_bot.wiring import local_thread_store
from worker.runner import prepare_stores

REPLY_TIMEOUT = 300.0


async def main(args: argparse.Namespace) -> None:
    settings = AgentSettings(_env_file=None, data_dir=args.data_dir)
    await prepare_stores(settings)
    threads = local_thread_store(settings)

    async def next_reply() -> CustomerLine:
        """The customer's first message after the loop's latest post (its question)."""
        deadline = asyncio.get_running_loop().time() + REPLY_TIMEOUT
        while asyncio.get_running_loop().time() < deadline:
            messages = await threads.messages(args.thread)
            asked = max((m.seq for m in messages if m.author_is_bot), default=0)
            for message in messages:
                if message.seq > asked and not message.author_is_bot:
                    return CustomerLine(text=message.text, message_id=message.message_id)
            await asyncio.sleep(0.05)
        raise TimeoutError("the customer did not answer")

    loop = PlainLoop(
        loop_parts(settings, {"local": threads}),
        ThreadRef(platform="local", workspace="local", channel="support", thread=args.thread),
        Actor(platform="local", user_id=args.customer),
        args.thread,
        next_reply,
        calls=args.calls,
        crash_after=args.crash_after,
    )
    await loop.converse(args.opening)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--customer", required=True)
    parser.add_argument("--opening", required=True)
    parser.add_argument("--crash-after", type=int, default=0)
    parser.add_argument("--calls", type=Path, required=True)
    asyncio.run(main(parser.parse_args()))

"""A server an earlier run left behind: what a SIGKILLed refund-bot left before worker.lifecycle.

Run as `python -m tests.support.orphan_server DATA_DIR ADDRESS UI_PORT`. It starts the embedded
server exactly as EmbeddedTemporal does (same command line, pid file in DATA_DIR) but untied to its
own life, prints "server pid N" once the server answers, and waits for the test to SIGKILL it: the
server then runs on, orphaned, as the issue saw.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agent.settings import TemporalSettings
from worker.lifecycle import record_server
from worker.server import EmbeddedTemporal, temporal_answers


async def main(data_dir: Path, address: str, ui_port: int) -> None:
    settings = TemporalSettings(_env_file=None, address=address, ui_port=ui_port)
    server = EmbeddedTemporal(settings, data_dir)
    argv = server.command()
    with server.log_path.open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    record_server(server.pid_file, proc.pid, argv)
    while not await temporal_answers(address, 0.5):
        if proc.returncode is not None:
            sys.exit(f"the server exited with {proc.returncode}")
        await asyncio.sleep(0.1)
    print(f"server pid {proc.pid}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    data = Path(sys.argv[1])
    data.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(data, sys.argv[2], int(sys.argv[3])))

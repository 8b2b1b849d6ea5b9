"""A real PostgreSQL server for the test session, from the binaries the pgserver wheel ships.

    session start -> initdb -> keeper -> postgres (tied to pytest's life, on a unix socket only)
    each test     -> CREATE DATABASE t_<random> -> its URL -> DROP DATABASE … WITH (FORCE)
                     (or create_password_database: a user who must give a password, and its URL)
    session end   -> SIGINT (PostgreSQL's fast shutdown) -> the directory removed (by the keeper
                     too, so a SIGKILLed pytest leaves nothing behind)
    the chaos drill -> take_down() ... bring_up() (the same data), pause() ... resume()

Nothing is downloaded: `make test` installs pgserver (PostgreSQL 16) from the lock file like any
other dependency. Only its binaries are used, started here rather than through pgserver's own
`get_server`, so that the server is this process's: it stops when the session ends, and if pytest
is SIGKILLed its keeper (harness/pg_keeper.py, tied to pytest's life) stops it.

As root (CI, containers), initdb and postgres refuse to run, so both run as the unprivileged
`nobody` user, from a hard-linked (or copied) tree of the binaries in the session's own
directory: the checkout may sit under a directory `nobody` cannot enter (/root is 0700), and
nothing on the machine is created or re-permissioned (no new user, no chmod of the checkout).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TypedDict

import asyncpg

from agent.stores.databases import close_database
from harness.cli_process import descendants
from harness.conditions import wait_for
from worker.lifecycle import spawn_child, terminate

PORT = 5432  # only names the socket file: the server listens on no TCP address
START_TIMEOUT = 60.0
KEEPER = Path(__file__).with_name("pg_keeper.py")


class _RunAs(TypedDict, total=False):
    """subprocess's keywords that run the child as another user (pg_keeper.RunAs)."""

    user: int
    group: int
    extra_groups: list[int]


def _pginstall() -> Path:
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pgserver is not installed: run `make setup` (it is in uv.lock)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another filesystem
        shutil.copy2(src, dst)


class PostgresServer:
    """One server for the session; `create_database` gives each test a database of its own."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="refund-bot-pg-"))
        self.socket_dir = self.root / "socket"
        self.data_dir = self.root / "data"
        self.log_path = self.root / "postgres.log"
        self._proc: asyncio.subprocess.Process | None = None
        self._user: str | None = None
        self._uid_gid: tuple[int, int] | None = None
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            self._user = "nobody"
            self._uid_gid = (nobody.pw_uid, nobody.pw_gid)

    @property
    def admin_url(self) -> str:
        return self.url("postgres")

    def url(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={self.socket_dir}&port={PORT}"

    def _bin(self) -> Path:
        source = _pginstall()
        if self._uid_gid is None:
            return source / "bin"
        # A tree `nobody` can enter, whatever the checkout's directories allow, laid out as in
        # site-packages: the binaries find their libraries at $ORIGIN/../../../pgserver.libs.
        self.root.chmod(0o755)
        site = self.root / "site-packages"
        for part in ("pginstall/bin", "pginstall/lib", "pginstall/share"):
            shutil.copytree(
                source / part.removeprefix("pginstall/"),
                site / "pgserver" / part,
                symlinks=True,
                copy_function=_link_or_copy,
            )
        libs = source.parent.parent / "pgserver.libs"
        shutil.copytree(libs, site / "pgserver.libs", symlinks=True, copy_function=_link_or_copy)
        return site / "pgserver" / "pginstall" / "bin"

    def _own(self, *paths: Path) -> None:
        for path in paths:
            path.mkdir(mode=0o700, exist_ok=True)
            if self._uid_gid is not None:
                os.chown(path, *self._uid_gid)

    def _as_server_user(self) -> _RunAs:
        if self._uid_gid is None:
            return {}
        return {"user": self._uid_gid[0], "group": self._uid_gid[1], "extra_groups": []}

    async def start(self) -> None:
        bin_dir = self._bin()
        self._own(self.data_dir, self.socket_dir)

        def run_initdb() -> subprocess.CompletedProcess[bytes]:
            return subprocess.run(
                [
                    str(bin_dir / "initdb"),
                    "-D", str(self.data_dir),
                    "--auth=trust",
                    "--username=postgres",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                ],
                capture_output=True,
                cwd=self.root,
                **self._as_server_user(),
            )  # fmt: skip

        initdb = await asyncio.to_thread(run_initdb)
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed ({initdb.returncode}): {initdb.stderr.decode()}")
        uid, gid = self._uid_gid or (-1, -1)
        log = self.log_path.open("ab")
        try:
            self._proc = await spawn_child(
                [
                    sys.executable, str(KEEPER), str(uid), str(gid), str(self.root), "--",
                    str(bin_dir / "postgres"),
                    "-D", str(self.data_dir),
                    "-k", str(self.socket_dir),
                    "-p", str(PORT),
                    "-c", "listen_addresses=",
                    # A test server: a crash of the machine may lose it, nothing else changes.
                    "-c", "fsync=off",
                    "-c", "synchronous_commit=off",
                    "-c", "full_page_writes=off",
                    "-c", "max_connections=400",
                ],
                on_parent_death=signal.SIGTERM,  # the keeper stops postgres if pytest dies
                stdout=log,
                stderr=log,
            )  # fmt: skip
        finally:
            log.close()
        await wait_for(self._answers, timeout=START_TIMEOUT, what="PostgreSQL to accept")

    async def _answers(self) -> bool:
        if self._proc is not None and self._proc.returncode is not None:
            raise RuntimeError(
                f"postgres exited with {self._proc.returncode}:\n{self.log_path.read_text()}"
            )
        try:
            conn = await asyncpg.connect(self.admin_url, timeout=2)
        except (OSError, asyncpg.PostgresError):
            return False
        await conn.close()
        return True

    @property
    def server_pids(self) -> set[int]:
        """The postgres processes now (the postmaster and its backends), not the keeper."""
        return descendants(self._proc.pid) if self._proc is not None else set()

    async def take_down(self) -> None:
        """Stop the server (a fast shutdown: clients disconnected), its data kept for bring_up()."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGUSR1)
        await wait_for(
            lambda: not self.server_pids, timeout=START_TIMEOUT, what="PostgreSQL to stop"
        )

    async def bring_up(self) -> None:
        """Start the server again on the same data, after take_down()."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGUSR2)
        await wait_for(self._answers, timeout=START_TIMEOUT, what="PostgreSQL to accept again")

    def pause(self) -> set[int]:
        """SIGSTOP every postgres process, as a frozen host would hold them; returns them."""
        paused = self.server_pids
        for pid in paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        return paused

    @staticmethod
    def resume(paused: set[int]) -> None:
        for pid in paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    async def create_database(self) -> str:
        name = f"t_{secrets.token_hex(6)}"
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return self.url(name)

    async def create_password_database(self, user: str, password: str) -> str:
        """A fresh database owned by `user`, who must give `password` (SCRAM), unlike every other
        connection here (trusted): its URL, the password in it, as a deployment's DATABASE_URL.
        Only `user` is asked: the rule goes first in pg_hba.conf, reloaded at once."""
        hba = self.data_dir / "pg_hba.conf"
        rule = f"local all {user} scram-sha-256\n"
        if rule not in hba.read_text():
            hba.write_text(rule + hba.read_text())
        conn = await asyncpg.connect(self.admin_url)
        try:
            exists = await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", user)
            verb = "ALTER" if exists else "CREATE"
            await conn.execute(f"{verb} ROLE \"{user}\" LOGIN PASSWORD '{password}'")
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()
        url = await self.create_database()
        name = url.split("/")[3].split("?")[0]
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f'ALTER DATABASE "{name}" OWNER TO "{user}"')
        finally:
            await conn.close()
        return url.replace("postgres@", f"{user}:{password}@", 1)

    async def drop_database(self, url: str) -> None:
        await close_database(url)
        name = url.split("/")[3].split("?")[0]
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    async def stop(self) -> None:
        if self._proc is not None:
            await terminate(self._proc, grace=15.0)  # the keeper: postgres's fast shutdown
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.asynccontextmanager
async def postgres_database() -> AsyncIterator[str]:
    """A PostgreSQL server of its own with one database on it, for one benchmark run: its URL.
    Stopped on the way out."""
    server = PostgresServer()
    await server.start()
    try:
        yield await server.create_database()
    finally:
        await server.stop()

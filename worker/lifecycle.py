"""Process lifetimes: every process refund-bot starts stops with it.

    SIGTERM | SIGHUP | SIGINT -> until_stopped cancels the main task -> it stops its parts in order
    spawn_child (own session, PR_SET_PDEATHSIG, lifeline pipe) -> the parent dies -> the child exits
    record_server (pid file in DATA_DIR) -> next start: stop_left_behind -> one line

A graceful stop is the main task's own clean-up (platforms, then the Worker, then Temporal), so a
stop signal only cancels that task and waits for it. A SIGKILLed parent cleans nothing up, so each
child is tied to its parent's life when it starts: the kernel signals it when the parent dies
(Linux), and a Python child also watches a pipe whose far end only the parent holds, which works
wherever pipes do. A server that escaped both (an older refund-bot, a platform without prctl) is
found by the pid file the next run reads.

The /proc reads are Linux's; elsewhere a left-behind server is not recognised (it is reused, as
any server that answers is, and said so).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from worker.exit import exit_now

log = logging.getLogger(__name__)

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
# A graceful stop that takes longer than this is cut short (exit 1; the children exit with us), so
# an operator's "stop" always ends within 10 s, as systemd's or a container runtime's would.
STOP_DEADLINE = 9.5

# The environment variable that tells a Python child which inherited fd is its lifeline.
LIFELINE_ENV = "REFUND_BOT_LIFELINE_FD"


def announce(text: str) -> None:
    """One line to stderr that never fails: after SIGHUP the terminal may already be gone."""
    with contextlib.suppress(OSError, ValueError):
        print(f"refund-bot: {text}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# Stopping on a signal
# ------------------------------------------------------------------------------------------------


async def until_stopped(main: Coroutine[Any, Any, T]) -> T | None:
    """Run `main` until it returns, or until SIGTERM, SIGHUP or SIGINT: then cancel it and wait
    while it stops what it started. Returns main's result, or None when a signal stopped it.

    A second signal does not cut the stop short (closing a terminal delivers SIGHUP twice: from the
    kernel and from the shell); STOP_DEADLINE bounds it instead.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    received: list[signal.Signals] = []
    deadline: list[asyncio.TimerHandle] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig)
        if len(received) > 1:
            log.debug("%s while already stopping", sig.name)
            return
        announce(f"{sig.name}: stopping (the platforms, then the Worker, then Temporal)")
        task.cancel()
        deadline.append(loop.call_later(STOP_DEADLINE, _stop_took_too_long))

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return await task
    except asyncio.CancelledError:
        if not received:
            raise  # cancelled from outside, not by a signal: not ours to swallow
        return None
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        for handle in deadline:
            handle.cancel()


async def to_the_end(step: Awaitable[T]) -> T:
    """Await a stop step to its end even if the task awaiting it is cancelled meanwhile, then pass
    the cancellation on.

    A stop can begin without a signal (the terminal's /quit, its end of input) and a signal can
    arrive halfway through it (closing a terminal does both at once). Cut short there, the stop
    would skip what comes after the step it was in: the Worker would be left to the parent-death
    signal instead of stopping gracefully. STOP_DEADLINE still bounds the whole stop.
    """
    task = asyncio.ensure_future(step)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                raise  # the step itself was cancelled: nothing left to wait for
            cancelled = True
            continue
        if cancelled:
            raise asyncio.CancelledError
        return result


def _stop_took_too_long() -> None:
    announce(f"not stopped within {STOP_DEADLINE:.1f} s; exiting now (its children exit with it)")
    exit_now(1)


# ------------------------------------------------------------------------------------------------
# Children tied to this process's life
# ------------------------------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1
try:
    # Resolved here, in the parent: nothing is looked up between fork and exec.
    _prctl: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: the lifeline and the pid file remain
    _prctl = None

# One pipe for the life of this process. Only this process holds the write end (close-on-exec,
# and never passed to a child), so a child reading the other end sees EOF exactly when this
# process is gone, however it ended. Nothing is ever written to it.
_lifeline: tuple[int, int] | None = None


def _lifeline_read_end() -> int:
    global _lifeline
    if _lifeline is None:
        _lifeline = os.pipe()
    return _lifeline[0]


def _tie_to_parent(sig: signal.Signals | None) -> Callable[[], None] | None:
    """A preexec function: the kernel sends `sig` to the child when the forking thread dies."""
    if sig is None or _prctl is None:
        return None
    parent = os.getpid()
    number = int(sig)

    def tie() -> None:
        # Runs in the child between fork and exec, and survives the exec. Linux ties it to the
        # thread that forked: spawn from the event-loop thread, which lives as long as the process.
        _prctl(_PR_SET_PDEATHSIG, number)
        if os.getppid() != parent:  # the parent died before the tie was made
            os._exit(1)

    return tie


async def spawn_child(
    argv: Sequence[str],
    *,
    on_parent_death: signal.Signals | None,
    lifeline: bool = False,
    env: Mapping[str, str] | None = None,
    stdout: IO[bytes] | int | None = None,
    stderr: IO[bytes] | int | None = None,
    stdin: int = asyncio.subprocess.DEVNULL,
) -> asyncio.subprocess.Process:
    """Start `argv` in its own session, tied to this process's life.

    Its own session: a terminal's Ctrl-C (or its hang-up) reaches only refund-bot, which then stops
    the child in order. `on_parent_death`: the signal the kernel sends the child if this process
    dies first (Linux). `lifeline`: the child also inherits the lifeline's read end, named in
    LIFELINE_ENV, for `watch_lifeline`.
    """
    child_env = dict(os.environ if env is None else env)
    pass_fds: tuple[int, ...] = ()
    if lifeline:
        fd = _lifeline_read_end()
        child_env[LIFELINE_ENV] = str(fd)
        pass_fds = (fd,)
    else:
        child_env.pop(LIFELINE_ENV, None)
    # asyncio forks in the event-loop thread, which is what the parent-death tie needs.
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=child_env,
        start_new_session=True,
        preexec_fn=_tie_to_parent(on_parent_death),
        pass_fds=pass_fds,
    )


def watch_lifeline(on_broken: Callable[[], None] | None = None) -> bool:
    """In a child started with `lifeline=True`: when the parent is gone, call `on_broken`
    (default: say so and exit at once). Returns whether there was a lifeline to watch.

    Exiting at once, not gracefully: a Worker whose supervisor is gone is an orphan nobody will
    restart or stop, and the agent is built to survive a Worker that dies mid-step.
    """
    raw = os.environ.pop(LIFELINE_ENV, None)
    if raw is None:
        return False
    fd = int(raw)
    loop = asyncio.get_running_loop()

    def broken() -> None:
        announce(f"parent process gone (lifeline closed); pid {os.getpid()} exits with it")
        exit_now(1)

    def readable() -> None:
        try:
            data = os.read(fd, 1)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            (on_broken or broken)()

    try:
        os.set_blocking(fd, False)
        loop.add_reader(fd, readable)
    except (OSError, ValueError) as err:  # inherited the variable but not the fd
        log.warning("%s=%s is not an open pipe (%s); no lifeline", LIFELINE_ENV, raw, err)
        return False
    return True


async def terminate(proc: asyncio.subprocess.Process, grace: float) -> int:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL. Returns the exit code.

    Cancelled while it waits, it SIGKILLs the child before passing the cancellation on: a stop
    that is itself interrupted still leaves no child behind.
    """
    try:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace):
                    return await proc.wait()
            except TimeoutError:
                log.warning("pid %s ignored SIGTERM for %.0f s; sending SIGKILL", proc.pid, grace)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        return await proc.wait()
    except BaseException:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        raise


# ------------------------------------------------------------------------------------------------
# A server an earlier run left behind
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerRecord:
    """What the pid file in DATA_DIR says: the server, and the refund-bot process that runs it."""

    pid: int
    argv: list[str]
    owner_pid: int
    owner_started: int | None  # the owner's start time (clock ticks after boot): pids get reused


def record_server(path: Path, pid: int, argv: Sequence[str]) -> None:
    """Write the pid file for a server this process just started (atomically: no half file)."""
    me = os.getpid()
    record = {"pid": pid, "argv": list(argv), "owner_pid": me, "owner_started": started_at(me)}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)


def forget_server(path: Path) -> None:
    path.unlink(missing_ok=True)


def read_server(path: Path) -> ServerRecord | None:
    try:
        return ServerRecord(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as err:
        log.warning("Ignoring the unreadable pid file %s (%s)", path, err)
        forget_server(path)
        return None


async def stop_left_behind(path: Path, grace: float) -> ServerRecord | None:
    """Stop the server the pid file at `path` names, if an earlier run left it behind.

    It counts as left behind when the live process at its pid has the recorded command line (a
    reused pid runs something else) and the refund-bot that started it is gone. A server whose
    refund-bot still runs is not touched: it is returned, and shared. A stale file is removed.

    Stopped rather than adopted: a server this process did not start cannot be tied to its life,
    so adopting it would leave it behind again at the next SIGKILL; starting a fresh one costs about
    a second and loses nothing (its database is in DATA_DIR).
    """
    record = read_server(path)
    if record is None:
        return None
    if await settled_command_line(record.pid) != record.argv:
        log.debug("Stale pid file %s: pid %s is not that server any more", path, record.pid)
        forget_server(path)
        return None
    if record.owner_started is not None and started_at(record.owner_pid) == record.owner_started:
        return record
    log.warning(
        "Stopping the Temporal server (pid %s) that an earlier refund-bot run (pid %s) left behind "
        "for %s; starting a fresh one",
        record.pid, record.owner_pid, path.parent,
    )  # fmt: skip
    await stop_process(record.pid, grace)
    forget_server(path)
    return None


async def stop_process(pid: int, grace: float) -> None:
    """SIGTERM a process that is not our child, then SIGKILL after `grace` s; wait until gone."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        # Not our child, so there is no exit to wait on: poll /proc.
        while alive(pid):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        if not alive(pid):
            return
        if sig == signal.SIGTERM:
            log.warning("pid %s ignored SIGTERM for %.0f s; sending SIGKILL", pid, grace)
    raise RuntimeError(f"pid {pid} survived SIGKILL")


# ------------------------------------------------------------------------------------------------
# Who a pid is (Linux /proc)
# ------------------------------------------------------------------------------------------------


_ENDED = ("Z", "X")  # /proc/<pid>/stat states: a zombie (dead, not yet reaped), or dead


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on; the name before it may hold spaces."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead and not yet reaped, does not)."""
    fields = _stat_fields(pid)
    if fields is not None:
        return fields[0] not in _ENDED
    if Path("/proc/self/stat").exists():
        return False  # /proc works and has no such pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def started_at(pid: int) -> int | None:
    """The process's start time in clock ticks after boot (field 22): with the pid, its identity."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None else None


def command_line(pid: int) -> list[str] | None:
    """The live process's argv, or None when there is no such process (or no /proc), or none yet."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [os.fsdecode(arg) for arg in raw.split(b"\0")[:-1]] if raw else None


_PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags (field 9): a kernel thread, which has no argv
_EXEC_SETTLES = 1.0  # s: far beyond an exec's few microseconds, even on a loaded machine


async def settled_command_line(pid: int) -> list[str] | None:
    """`pid`'s argv once its exec has finished: None only if it has none to show.

    A process inside execve shows an empty command line for a moment: the kernel lets its parent go
    (the spawn returns) before it sets up the new program's arguments. Read then, a just-started
    server looks like another program (seen about once in 300 spawns on a busy machine).
    """
    deadline = time.monotonic() + _EXEC_SETTLES
    while (argv := command_line(pid)) is None and time.monotonic() < deadline:
        fields = _stat_fields(pid)
        if fields is None or fields[0] in _ENDED or int(fields[6]) & _PF_KTHREAD:
            return None
        await asyncio.sleep(0.002)
    return argv

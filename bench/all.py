"""Every benchmark docs/benchmarks.md quotes, one after another, and the plots in docs/img.

    reference demo: git clone (pinned commit) into .bench/reference + its own virtualenv (uv)
    each benchmark: its own process, with the arguments the docs quote (--quick: small sizes)
      -> its output streamed here and kept in <results>/<name>.txt; its plot to --plot-dir
         (docs/img; a --quick run's rough plots go to <results>/img instead)
    -> a summary: each benchmark, its exit status, its duration (also <results>/summary.txt)

The reference demo (temporal-community/agent-memory-and-state) is fetched by whoever runs this,
never committed: cloned once into the cache directory (.bench/reference, gitignored) at
REFERENCE_COMMIT, its virtualenv made by uv from its own lock. When it cannot be fetched (offline),
the benchmarks that need it are skipped, those that draw it beside us run one-sided with their plots
in <results>/img-one-sided (a published two-sided plot is never redrawn one-sided), and the run
exits non-zero with one line naming the comparisons it did not make and why.
`--reference PATH` uses a checkout of your own instead (with its .venv).

The Slack ack benchmark's "before" side is this repository at BASELINE_COMMIT (the code that
acknowledged a message without writing it anywhere), exported with `git archive` into
.bench/baseline-<commit>.

A benchmark that fails is reported and the rest still run; the exit status is non-zero if any
failed or any comparison was not made. SIGINT, SIGTERM or SIGHUP stops the benchmark that is
running (SIGINT first, so it cleans up what it started) and the rest are not run.

    .venv/bin/python -m bench.all [--quick] [--only NAME ...] [--results DIR] [--plot-dir DIR]
        [--reference PATH] [--list]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from bench.plot import IMAGES
from worker.lifecycle import spawn_child, terminate

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".bench"
REFERENCE_URL = "https://github.com/temporal-community/agent-memory-and-state"
# The snapshot the figures in docs/benchmarks.md were taken against (2026-08-20).
REFERENCE_COMMIT = "59fb4186bc50daefe09653a850197a985b3fa1cf"
BASELINE_COMMIT = "13c9782"

# Placeholders in a benchmark's arguments, filled in once the checkouts are ready.
REFERENCE = "{reference}"
BASELINE = "{baseline}"
# The run's results directory: where one benchmark keeps what a later one draws beside its own.
RESULTS = "{results}"
CROWD_KEPT = f"{RESULTS}/reply_crowd.json"

# A benchmark stopped by a signal gets this long to clean up after SIGINT, then SIGTERM, then KILL.
STOP_GRACE = 20.0


@dataclass(frozen=True)
class Benchmark:
    name: str
    module: str
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()
    plot: str | None = None  # the PNG it draws into the plot directory
    # Needs the reference demo: skipped without it. Else a side it draws when it has one.
    needs_reference: bool = False
    argv: tuple[str, ...] = ()  # a command of its own instead of the module (--extra)

    def command(
        self, quick: bool, plot_dir: Path, checkouts: dict[str, Path | None], results: Path
    ) -> list[str]:
        if self.argv:
            return list(self.argv)
        args = list(self.quick if quick else self.full)
        if self.plot:
            args += ["--plot", str(plot_dir / f"{self.plot}.png")]
        filled: list[str] = []
        for arg in args:  # every placeholder filled in this one pass
            if arg in (REFERENCE, BASELINE):
                path = checkouts.get(arg)
                if path is None:  # the option goes with its value: drop the flag before it
                    filled.pop()
                    continue
                arg = str(path)
            filled.append(arg.replace(RESULTS, str(results)))
        return [sys.executable, "-m", self.module, *filled]


# In the order of docs/benchmarks.md. `full` is the command each section quotes; `quick` the same
# benchmark small enough that all of them take minutes on a laptop.
BENCHMARKS = (
    Benchmark("turn_latency", "bench.turn_latency", (), ("--rounds", "5", "--codec-rounds", "20"),
              plot="turn_latency"),
    Benchmark("turn_update", "bench.turn_update", ("--server", "default"),
              ("--server", "default", "--rounds", "3"), plot="turn_update"),
    Benchmark("turn_update_embedded", "bench.turn_update", ("--server", "embedded"),
              ("--server", "embedded", "--rounds", "3")),
    Benchmark("tracing_cost", "bench.tracing_cost", (), ("--rounds", "5")),
    Benchmark("throughput", "bench.throughput", ("--reference", REFERENCE),
              ("--reference", REFERENCE, "--conversations", "20", "50", "--workers", "1"),
              plot="throughput", needs_reference=True),
    Benchmark("history_size", "bench.history_size", ("--reference", REFERENCE),
              ("--reference", REFERENCE), plot="history_size"),
    Benchmark("codec_cost", "bench.codec_cost", (), ("--codec-rounds", "30")),
    Benchmark("recovery", "bench.recovery", ("--drills", "20", "--held", "0"),
              ("--drills", "4", "--held", "0"), plot="recovery"),
    Benchmark("recovery_held", "bench.recovery", ("--drills", "0", "--held", "200"),
              ("--drills", "0", "--held", "20")),
    Benchmark("recovery_held_2000", "bench.recovery", ("--drills", "0", "--held", "2000"),
              ("--drills", "0", "--held", "50")),
    # Two Workers and one of them killed: the survivor keeps its share of the crowd.
    Benchmark("recovery_held_2000_two_workers", "bench.recovery",
              ("--drills", "0", "--held", "2000", "--workers", "2", "--breakdown"),
              ("--drills", "0", "--held", "50", "--workers", "2")),
    Benchmark("recovery_held_postgresql", "bench.recovery",
              ("--drills", "0", "--held", "2000", "--backend", "postgresql"),
              ("--drills", "0", "--held", "50", "--backend", "postgresql")),
    Benchmark("recovery_held_10000", "bench.recovery",
              ("--drills", "0", "--held", "10000", "--breakdown"),
              ("--drills", "0", "--held", "100", "--breakdown")),
    Benchmark("recovery_held_10000_two_workers", "bench.recovery",
              ("--drills", "0", "--held", "10000", "--workers", "2", "--breakdown"),
              ("--drills", "0", "--held", "100", "--workers", "2", "--breakdown")),
    Benchmark("recovery_held_10000_postgresql", "bench.recovery",
              ("--drills", "0", "--held", "10000", "--workers", "2", "--backend", "postgresql",
               "--breakdown"),
              ("--drills", "0", "--held", "100", "--workers", "2", "--backend", "postgresql",
               "--breakdown")),
    # The server's memory limit under the held crowd: the two-Worker entry above is its other side.
    Benchmark("recovery_held_10000_server_memory", "bench.recovery",
              ("--drills", "0", "--held", "10000", "--workers", "2", "--server-memory", "350MiB",
               "--breakdown"),
              ("--drills", "0", "--held", "100", "--workers", "2", "--server-memory", "350MiB",
               "--breakdown")),
    # The same crowd on the server `refund-bot run` embeds (its database in a file), without the
    # limit and with it.
    Benchmark("recovery_held_10000_embedded", "bench.recovery",
              ("--drills", "0", "--held", "10000", "--workers", "2", "--server", "embedded",
               "--breakdown"),
              ("--drills", "0", "--held", "100", "--workers", "2", "--server", "embedded",
               "--breakdown"), plot="held_crowd"),
    Benchmark("recovery_held_10000_embedded_memory", "bench.recovery",
              ("--drills", "0", "--held", "10000", "--workers", "2", "--server", "embedded",
               "--server-memory", "350MiB", "--breakdown"),
              ("--drills", "0", "--held", "100", "--workers", "2", "--server", "embedded",
               "--server-memory", "350MiB", "--breakdown")),
    Benchmark("recovery_two_workers", "bench.recovery",
              ("--drills", "20", "--held", "200", "--workers", "2"),
              ("--drills", "2", "--held", "20", "--workers", "2")),
    Benchmark("open_recovery", "bench.open_recovery", ("--open", "2000", "--rounds", "2"),
              ("--open", "50", "--rounds", "1", "--replies", "5"), plot="open_recovery"),
    Benchmark("open_recovery_10000", "bench.open_recovery",
              ("--open", "10000", "--rounds", "1", "--variants", "shutdown"),
              ("--open", "100", "--rounds", "1", "--replies", "5", "--variants", "shutdown")),
    Benchmark("successor_recovery", "bench.successor_recovery", ("--open", "500", "--rounds", "2"),
              ("--open", "30", "--rounds", "1", "--replies", "5"), plot="successor_recovery"),
    # The crowd's plot is drawn by its second entry: two Workers beside the first entry's runs.
    Benchmark("reply_crowd", "bench.reply_crowd",
              ("--open", "10000", "--cache", "1000", "10000", "--keep", CROWD_KEPT),
              ("--open", "50", "--keep", CROWD_KEPT)),
    Benchmark("reply_crowd_two_workers", "bench.reply_crowd",
              ("--open", "10000", "--cache", "10000", "--sticky", "120", "--workers", "2",
               "--beside", CROWD_KEPT),
              ("--open", "50", "--sticky", "120", "--workers", "2", "--beside", CROWD_KEPT),
              plot="reply_crowd"),
    Benchmark("reply_crowd_postgresql", "bench.reply_crowd",
              ("--open", "10000", "--cache", "10000", "--sticky", "120", "--workers", "2",
               "--backend", "postgresql"),
              ("--open", "50", "--sticky", "120", "--workers", "2", "--backend", "postgresql")),
    # The server's memory: no limit, then the limit that held it under 500 MB.
    Benchmark("reply_crowd_server_memory", "bench.reply_crowd",
              ("--open", "10000", "--cache", "10000", "--sticky", "120", "--workers", "2",
               "--server-memory", "off", "350MiB"),
              ("--open", "50", "--server-memory", "off", "64MiB")),
    Benchmark("crash_drill", "bench.crash_drill", ("--drills", "5"), ("--drills", "1")),
    Benchmark("replay_cost", "bench.replay_cost", (), ("--replays", "20")),
    Benchmark("random_kills", "bench.random_kills", ("--conversations", "200"),
              ("--conversations", "20")),
    Benchmark("random_kills_two_workers", "bench.random_kills",
              ("--conversations", "200", "--workers", "2"),
              ("--conversations", "20", "--workers", "2")),
    Benchmark("crash_cost", "bench.crash_cost", (), ("--max-steps", "2")),
    Benchmark("slack_ack", "bench.slack_ack", ("--bursts", "40", "--baseline", BASELINE),
              ("--bursts", "2", "--one-by-one", "20", "--baseline", BASELINE), plot="slack_ack"),
    Benchmark("router_cost", "bench.router_cost", (), ("--rounds", "5", "--messages", "4")),
    Benchmark("slack_post", "bench.slack_post", (), ("--posts", "20")),
    Benchmark("store_reads", "bench.store_reads", (),
              ("--orders", "1000", "10000", "--calls", "50")),
    Benchmark("sqlite_calls", "bench.sqlite_calls", (), ("--calls", "200")),
    Benchmark("stop_time", "bench.stop_time", ("--runs", "5"), ("--runs", "1")),
)  # fmt: skip


@dataclass
class Outcome:
    name: str
    status: str  # "ok", "exit N", "skipped: why", "stopped", "not run"
    seconds: float = 0.0
    failed: bool = False
    # The comparison it could not make (a side it lacked): the run then exits non-zero.
    uncompared: bool = False


@dataclass
class Run:
    results: Path
    outcomes: list[Outcome] = field(default_factory=list)
    uncompared: str | None = None  # the line naming the comparisons not made, if any


def _say(text: str) -> None:
    print(f"bench.all: {text}", flush=True)


async def _child(
    argv: Sequence[str], log: IO[bytes], env: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run argv to its end, its output streamed to this process's stdout and to `log`: its exit
    status and the last line it printed.

    Cancelled (a stop signal), it is asked to stop with SIGINT, as a terminal's Ctrl-C would: a
    benchmark then leaves its own context managers and stops what it started. It runs in a session
    of its own (no terminal signal reaches it but ours) and dies with this process if we are
    killed, so no benchmark outlives the runner.
    """
    proc = await spawn_child(
        argv,
        on_parent_death=signal.SIGTERM,
        env={**(env or os.environ), "PYTHONUNBUFFERED": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    tail = b""
    try:
        while chunk := await proc.stdout.read(65536):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            log.write(chunk)
            log.flush()
            tail = (tail + chunk)[-4096:]
        lines = tail.decode(errors="replace").strip().splitlines()
        return await proc.wait(), lines[-1].strip() if lines else ""
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), STOP_GRACE)
        except TimeoutError:
            await terminate(proc, grace=5)
        raise


async def _step(argv: list[str], log: IO[bytes], env: dict[str, str] | None = None) -> str | None:
    """One step of fetching a checkout: None when it succeeded, else why not in one line."""
    log.write(f"$ {shlex.join(argv)}\n".encode())
    try:
        code, last = await _child(argv, log, env)
    except FileNotFoundError as err:
        return f"{argv[0]}: {err.strerror}"
    if code == 0:
        return None
    return f"`{shlex.join(argv[:3])} ...` exited {code}" + (f": {last}" if last else "")


def _uv() -> str | None:
    """The uv `make setup` bootstraps into .tools/, else one on PATH."""
    bootstrapped = ROOT / ".tools" / "bin" / "uv"
    return str(bootstrapped) if bootstrapped.exists() else shutil.which("uv")


async def fetch_reference(checkout: Path, url: str, log: IO[bytes]) -> Path | str:
    """The reference demo at REFERENCE_COMMIT in `checkout`, its virtualenv synced from its own
    lock: the checkout, or why it could not be made, in one line."""
    if not (checkout / ".git").exists():
        partial = checkout.with_name(checkout.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        # Into a side directory first: a clone cut short is never taken for a checkout.
        why = await _step(["git", "clone", "--quiet", "--no-checkout", url, str(partial)], log)
        if why:
            shutil.rmtree(partial, ignore_errors=True)
            return why
        partial.rename(checkout)
    git = ["git", "-C", str(checkout), "-c", "advice.detachedHead=false"]
    missing = await _step([*git, "cat-file", "-e", f"{REFERENCE_COMMIT}^{{commit}}"], log)
    if missing and (why := await _step([*git, "fetch", "--quiet", "origin"], log)):
        return why
    if why := await _step([*git, "checkout", "--quiet", "--force", REFERENCE_COMMIT], log):
        return why
    uv = _uv()
    if uv is None:
        return "no uv to make its virtualenv with (`make setup` installs one into .tools/)"
    env = dict(os.environ)
    # Run from refund-bot's own environment (`uv run`), uv would otherwise be told of that one.
    for name in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT"):
        env.pop(name, None)
    env.setdefault("UV_PYTHON_DOWNLOADS", "never")
    if why := await _step([uv, "sync", "--locked", "--directory", str(checkout)], log, env):
        return why
    return checkout


async def export_baseline(directory: Path, log: IO[bytes]) -> Path | str:
    """This repository at BASELINE_COMMIT, as files: the checkout bench.slack_ack's --baseline
    serves. It imports this environment's packages, which that commit's lock also pins."""
    if (directory / "bench" / "slack_ack.py").exists():
        return directory
    archive = directory.with_suffix(".tar")
    directory.parent.mkdir(parents=True, exist_ok=True)
    argv = ["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), BASELINE_COMMIT]
    if why := await _step(argv, log):
        return why
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(partial, filter="data")
    archive.unlink()
    partial.rename(directory)
    return directory


def _select(names: Sequence[str] | None, extras: Sequence[Benchmark]) -> list[Benchmark]:
    known = {b.name: b for b in (*BENCHMARKS, *extras)}
    if not names:
        return [*BENCHMARKS, *extras]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"bench.all: no benchmark {', '.join(unknown)}; --list names them")
    return [known[n] for n in names]


def _extra(spec: str) -> Benchmark:
    name, sep, command = spec.partition("=")
    if not sep or not name or not command:
        raise argparse.ArgumentTypeError(f"{spec!r}: NAME=COMMAND")
    return Benchmark(name, "", argv=tuple(shlex.split(command)))


async def _checkouts(
    chosen: list[Benchmark], quick: bool, run: Run, reference: Path | None, reference_url: str
) -> tuple[dict[str, Path | None], list[str]]:
    """The sides the chosen benchmarks compare against, and why each one missing is missing."""
    checkouts: dict[str, Path | None] = {REFERENCE: None, BASELINE: None}
    why_not: list[str] = []
    uses = {arg for b in chosen for arg in (b.quick if quick else b.full)}
    if REFERENCE in uses:
        if reference is not None:
            checkouts[REFERENCE] = reference
        else:
            _say(f"the reference demo at {REFERENCE_COMMIT[:7]}, in {CACHE / 'reference'}")
            with (run.results / "reference.txt").open("wb") as log:
                got = await fetch_reference(CACHE / "reference", reference_url, log)
            if isinstance(got, Path):
                checkouts[REFERENCE] = got
            else:
                why_not.append(f"the reference demo could not be fetched ({got})")
    if BASELINE in uses:
        with (run.results / "baseline.txt").open("wb") as log:
            got = await export_baseline(CACHE / f"baseline-{BASELINE_COMMIT}", log)
        if isinstance(got, Path):
            checkouts[BASELINE] = got
        else:
            why_not.append(f"commit {BASELINE_COMMIT} could not be exported ({got})")
    return checkouts, why_not


def uncompared_line(run: Run, one_sided_plots: Path, why_not: list[str]) -> str | None:
    """The one line naming the comparisons this run did not make, or None if it made them all."""
    skipped = [o.name for o in run.outcomes if o.uncompared and o.status.startswith("skipped")]
    one_sided = [o.name for o in run.outcomes if o.uncompared and o.name not in skipped]
    if not skipped and not one_sided:
        return None
    parts = ([f"{', '.join(skipped)} skipped"] if skipped else []) + (
        [
            f"{', '.join(one_sided)} without the other side (plots in {one_sided_plots}, the "
            "published ones left alone)"
        ]
        if one_sided
        else []
    )
    return f"comparisons not made: {'; '.join(parts)}: {'; '.join(why_not)}"


async def run_all(
    chosen: list[Benchmark],
    quick: bool,
    run: Run,
    plot_dir: Path,
    reference: Path | None,
    reference_url: str,
) -> None:
    checkouts, why_not = await _checkouts(chosen, quick, run, reference, reference_url)
    # A side missing: its plot would be one-sided, so it is drawn beside the results instead.
    one_sided_plots = run.results / "img-one-sided"
    for bench in chosen:
        args = bench.quick if quick else bench.full
        lacks = any(side in args and checkouts[side] is None for side in (REFERENCE, BASELINE))
        if bench.needs_reference and checkouts[REFERENCE] is None:
            skipped = Outcome(bench.name, "skipped: no reference demo", uncompared=True)
            run.outcomes.append(skipped)
            continue
        argv = bench.command(quick, one_sided_plots if lacks else plot_dir, checkouts, run.results)
        _say(f"{bench.name}: {shlex.join(argv)}")
        outcome = Outcome(bench.name, "stopped", failed=True, uncompared=lacks)
        run.outcomes.append(outcome)
        started = time.monotonic()
        with (run.results / f"{bench.name}.txt").open("wb") as log:
            log.write(f"$ {shlex.join(argv)}\n".encode())
            try:
                code, _ = await _child(argv, log)
            finally:
                outcome.seconds = time.monotonic() - started
            log.write(f"exit {code} after {outcome.seconds:.1f} s\n".encode())
        outcome.status = ("ok" if code == 0 else f"exit {code}") + (", one-sided" if lacks else "")
        outcome.failed = code != 0
        _say(f"{bench.name}: {outcome.status} after {outcome.seconds:.1f} s")
    if line := uncompared_line(run, one_sided_plots, why_not):
        run.uncompared = line


def summary(run: Run, chosen: list[Benchmark]) -> str:
    ran = {o.name for o in run.outcomes}
    outcomes = [*run.outcomes, *(Outcome(b.name, "not run") for b in chosen if b.name not in ran)]
    width = max(len(o.name) for o in outcomes)
    lines = [f"{'benchmark':<{width}}  {'status':<28}  duration"]
    for o in outcomes:
        took = f"{o.seconds:8.1f} s" if o.seconds else ""
        lines.append(f"{o.name:<{width}}  {o.status:<28}  {took}")
    total = sum(o.seconds for o in outcomes)
    failed = sum(o.failed for o in outcomes)
    uncompared = sum(o.uncompared for o in outcomes)
    minutes, seconds = divmod(round(total), 60)
    lines.append(
        f"{len(outcomes)} benchmarks, {failed} failed, "
        + (f"{uncompared} without their comparison, " if uncompared else "")
        + f"{minutes} min {seconds} s in all"
    )
    return "\n".join(lines)


async def _until_signalled(main: asyncio.Task[None]) -> signal.Signals | None:
    """Await `main`; a stop signal cancels it (which stops the running benchmark). Returns the
    signal that stopped it, if one did."""
    loop = asyncio.get_running_loop()
    received: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        if not received:
            _say(f"{sig.name}: stopping the benchmark that is running; the rest will not run")
            main.cancel()
        received.append(sig)

    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    for sig in stops:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await main
    finally:
        for sig in stops:
            loop.remove_signal_handler(sig)
    return received[0] if received else None


async def main(args: argparse.Namespace, chosen: list[Benchmark], results: Path) -> int:
    run = Run(results)
    task = asyncio.ensure_future(
        run_all(chosen, args.quick, run, args.plot_dir, args.reference, args.reference_url)
    )
    stopped = await _until_signalled(task)
    table = summary(run, chosen)
    (results / "summary.txt").write_text(table + "\n")
    print(f"\n{table}\nresults: {results}\nplots: {args.plot_dir}", flush=True)
    if run.uncompared:
        _say(run.uncompared)
    if stopped is not None:
        return 128 + stopped
    return 1 if run.uncompared or any(o.failed for o in run.outcomes) else 0


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.all", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="every benchmark small: minutes")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these benchmarks, in this order")
    parser.add_argument("--results", type=Path, help="default .bench/results/<UTC time>")
    parser.add_argument(
        "--plot-dir", type=Path, help="default docs/img; with --quick, img/ in the results"
    )
    parser.add_argument(
        "--reference", type=Path, help="a checkout of the reference demo with its .venv: no fetch"
    )
    parser.add_argument("--reference-url", default=REFERENCE_URL, help="where to clone it from")
    parser.add_argument(
        "--extra",
        type=_extra,
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help="one more benchmark: COMMAND, split as a shell would (for testing the runner)",
    )
    parser.add_argument("--list", action="store_true", help="the benchmarks and their commands")
    args = parser.parse_args(argv)
    if args.reference is not None:
        args.reference = args.reference.resolve()
    if args.plot_dir is not None:
        args.plot_dir = args.plot_dir.resolve()
    return args


def listing(quick: bool, plot_dir: Path) -> str:
    checkouts: dict[str, Path | None] = {
        REFERENCE: CACHE / "reference",
        BASELINE: CACHE / f"baseline-{BASELINE_COMMIT}",
    }
    results = CACHE / "results" / "<UTC time>"
    width = max(len(b.name) for b in BENCHMARKS)
    return "\n".join(
        f"{b.name:<{width}} {shlex.join(b.command(quick, plot_dir, checkouts, results)[1:])}"
        for b in BENCHMARKS
    )


if __name__ == "__main__":
    arguments = parse()
    if arguments.list:
        print(listing(arguments.quick, arguments.plot_dir or IMAGES))
        raise SystemExit(0)
    selected = _select(arguments.only, arguments.extra)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + ("-quick" if arguments.quick else "")
    out: Path = (arguments.results or CACHE / "results" / stamp).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # A quick run's figures are rough: its plots stay beside its results, not over the page's.
    arguments.plot_dir = arguments.plot_dir or (out / "img" if arguments.quick else IMAGES)
    raise SystemExit(asyncio.run(main(arguments, selected, out)))

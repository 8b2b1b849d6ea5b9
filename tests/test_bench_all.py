"""bench.all, the one command for every benchmark: run on two of the cheapest benchmarks (no
server), beside a stand-in that fails, to check the summary, the files and that a failure neither
stops the rest nor goes unreported."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import bench.all
from bench.all import BENCHMARKS, REFERENCE, Benchmark, main, parse

ROOT = Path(__file__).resolve().parent.parent


def test_runs_each_one_keeps_its_output_and_reports_a_failure(tmp_path: Path) -> None:
    results = tmp_path / "results"
    failing = f"{sys.executable} -c 'import sys; print(\"no figures\"); sys.exit(3)'"
    done = subprocess.run(
        [sys.executable, "-m", "bench.all", "--quick", "--results", str(results),
         "--plot-dir", str(tmp_path / "img"), "--extra", f"broken={failing}",
         "--only", "broken", "codec_cost", "replay_cost"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    summary = (results / "summary.txt").read_text()
    rows = {line.split()[0]: line.split()[1:] for line in summary.splitlines()[1:-1]}
    assert rows["broken"][:2] == ["exit", "3"], summary
    # The failure came first, and both benchmarks after it still ran.
    assert rows["codec_cost"][0] == "ok" and rows["replay_cost"][0] == "ok", summary
    assert summary.splitlines()[-1].startswith("3 benchmarks, 1 failed"), summary
    assert summary in done.stdout  # printed at the end too
    codec = (results / "codec_cost.txt").read_text()
    assert codec.startswith("$ ") and "-m bench.codec_cost --codec-rounds 30" in codec
    assert "per decide turn" in codec and codec.rstrip().splitlines()[-1].startswith("exit 0")
    assert "no figures" in (results / "broken.txt").read_text()
    assert "no figures" in done.stdout  # streamed as it ran


def test_every_plot_in_docs_img_is_drawn_by_a_benchmark() -> None:
    drawn = {b.plot for b in BENCHMARKS if b.plot}
    assert {p.stem for p in (ROOT / "docs" / "img").glob("*.png")} <= drawn


def test_a_quick_run_leaves_the_published_plots_alone() -> None:
    args = parse(["--quick"])
    assert args.plot_dir is None  # chosen once the results directory is: <results>/img
    drawing = [b for b in BENCHMARKS if b.plot]
    quick = {b.name: b.command(True, Path("/r/img"), {}, Path("/r")) for b in drawing}
    assert all("/r/img/" in " ".join(argv) for argv in quick.values())


def test_the_crowd_plot_draws_the_runs_its_first_entry_kept() -> None:
    entries = {b.name: b for b in BENCHMARKS}
    names = [b.name for b in BENCHMARKS]
    assert names.index("reply_crowd") < names.index("reply_crowd_two_workers")
    for quick in (False, True):
        first = entries["reply_crowd"].command(quick, Path("/img"), {}, Path("/r/run"))
        second = entries["reply_crowd_two_workers"].command(quick, Path("/img"), {}, Path("/r/run"))
        kept = first[first.index("--keep") + 1]
        assert kept.startswith("/r/run/")
        assert second[second.index("--beside") + 1] == kept
        assert second[second.index("--plot") + 1] == "/img/reply_crowd.png"


def test_a_stop_signal_stops_the_running_benchmark_and_the_rest(tmp_path: Path) -> None:
    code = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"
    sleeper = f"{sys.executable} -c '{code}'"
    runner = subprocess.Popen(
        [sys.executable, "-m", "bench.all", "--results", str(tmp_path), "--extra",
         f"sleeper={sleeper}", "--only", "sleeper", "codec_cost"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert runner.stdout is not None
    line = runner.stdout.readline()
    while line.startswith("bench.all:"):  # the runner's own line naming the command
        line = runner.stdout.readline()
    child = int(line)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 128 + signal.SIGTERM
    rest = runner.stdout.read()
    runner.stdout.close()
    assert not Path(f"/proc/{child}").exists(), "the benchmark outlived the runner"
    summary = (tmp_path / "summary.txt").read_text()
    assert "sleeper" in summary and "stopped" in summary, rest
    assert "codec_cost" in summary and "not run" in summary, rest


def test_a_run_without_the_reference_says_so_and_leaves_the_published_plots_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Offline: the reference cannot be cloned (no repository there), into a cache of the test's.
    monkeypatch.setattr(bench.all, "CACHE", tmp_path / "cache")
    images, results = tmp_path / "img", tmp_path / "results"
    images.mkdir()
    published = images / "beside.png"
    published.write_text("ours reference")  # a two-sided plot the page shows
    stand_in = "tests.support.stand_in_benchmark"
    chosen = [
        Benchmark(
            "needs", stand_in, ("--reference", REFERENCE), plot="needs", needs_reference=True
        ),
        Benchmark("beside", stand_in, ("--reference", REFERENCE), plot="beside"),
        Benchmark("solo", stand_in, (), plot="solo"),  # compares with nothing: drawn as usual
    ]
    args = parse(["--plot-dir", str(images), "--reference-url", str(tmp_path / "no-such-repo")])
    results.mkdir()
    code = asyncio.run(main(args, chosen, results))
    out = capsys.readouterr().out
    assert code == 1, out
    assert published.read_text() == "ours reference"  # not redrawn one-sided
    assert (results / "img-one-sided" / "beside.png").read_text() == "ours"
    assert (images / "solo.png").read_text() == "ours"
    assert not (images / "needs.png").exists()
    (line,) = [line for line in out.splitlines() if "comparisons not made" in line]
    assert "needs skipped" in line and "beside without the other side" in line, line
    assert "the reference demo could not be fetched" in line, line
    assert "solo" not in line, line
    summary = (results / "summary.txt").read_text()
    assert "3 benchmarks, 0 failed, 2 without their comparison" in summary, summary

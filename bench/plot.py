"""The benchmarks' PNG plots (matplotlib without a display), written beside docs/benchmarks.md.

a benchmark's figures -> axes(...) -> drawn -> save(fig, path) -> docs/img/<benchmark>.png
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display, no GUI toolkit

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "img"


def default_path(benchmark: str) -> Path:
    return IMAGES / f"{benchmark}.png"


def axes(title: str, xlabel: str, ylabel: str, *, columns: int = 1) -> tuple[Figure, list[Axes]]:
    """A figure of `columns` side-by-side plots sharing the title."""
    fig, grid = plt.subplots(1, columns, figsize=(6.5 * columns, 4.2), dpi=100, squeeze=False)
    fig.suptitle(title)
    for ax in grid[0]:
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    return fig, list(grid[0])


def cdf(ax: Axes, label: str, samples: list[float]) -> None:
    """Each sample's share of samples at or below it: read p50, p95, p99 off the curve."""
    ordered = sorted(samples)
    shares = [(i + 1) / len(ordered) for i in range(len(ordered))]
    ax.step(ordered, shares, where="post", label=label)


def cdf_figure(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    curves: dict[str, list[float]],
    goals: Sequence[tuple[float, str | None]] = (),
) -> Path:
    """One plot of CDFs, a curve for each label, and the goals as grey lines (the first dashed,
    the rest dotted; a goal labelled None shares the legend line before it). Saved to `path`."""
    fig, (ax,) = axes(title, xlabel, ylabel)
    for label, samples in curves.items():
        cdf(ax, label, samples)
    for i, (at, named) in enumerate(goals):
        ax.axvline(at, linestyle=":" if i else "--", color="grey", label=named)
    ax.legend()
    return save(fig, path)


def save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

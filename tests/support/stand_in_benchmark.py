"""A benchmark's stand-in for bench.all's tests: takes the options a two-sided benchmark takes,
draws its --plot as a file naming the sides it had, and exits 0. No server, no measurement."""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", type=Path)
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    sides = [
        "ours",
        *(["reference"] if args.reference else []),
        *(["baseline"] if args.baseline else []),
    ]
    print(f"measured: {' '.join(sides)}", flush=True)
    if args.plot:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        args.plot.write_text(" ".join(sides))


if __name__ == "__main__":
    main()

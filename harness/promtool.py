"""promtool, Prometheus' rule checker, for the tests: found, or taken from Debian's package.

    promtool() -> on PATH | .tools/bin/promtool | apt-get download prometheus -> dpkg-deb -x
        -> usr/bin/promtool copied to .tools/bin/promtool (nothing installed system-wide)

`make test` runs `python -m harness.promtool` first, as it bootstraps uv; tests/test_alerts.py
calls promtool() too, so a plain pytest gets it the same way. The package is only unpacked: no
Prometheus server, service or user is installed. A package list that does not know the package
yet is refreshed once (`apt-get update`, root only: CI and the developers' machines run as root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTALLED = ROOT / ".tools" / "bin" / "promtool"
PACKAGE = "prometheus"


class PromtoolUnavailable(RuntimeError):
    """promtool is not on this machine and could not be taken from the package."""


def promtool(install: bool = True) -> Path:
    found = shutil.which("promtool")
    if found:
        return Path(found)
    if INSTALLED.exists():
        return INSTALLED
    if not install:
        raise PromtoolUnavailable("promtool not found (python -m harness.promtool installs it)")
    return _from_package()


def _from_package() -> Path:
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise PromtoolUnavailable("promtool is missing and this machine has no apt-get/dpkg-deb")
    with tempfile.TemporaryDirectory() as tmp:
        download = ["apt-get", "download", "-q", PACKAGE]
        done = subprocess.run(download, cwd=tmp, capture_output=True, text=True)
        if done.returncode != 0 and os.geteuid() == 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, check=False)
            done = subprocess.run(download, cwd=tmp, capture_output=True, text=True)
        if done.returncode != 0:
            raise PromtoolUnavailable(f"apt-get download {PACKAGE} failed: {done.stderr.strip()}")
        (deb,) = Path(tmp).glob(f"{PACKAGE}_*.deb")
        unpacked = Path(tmp) / "unpacked"
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
        INSTALLED.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(unpacked / "usr" / "bin" / "promtool", INSTALLED)
    return INSTALLED


if __name__ == "__main__":
    try:
        print(promtool())
    except PromtoolUnavailable as err:
        print(f"harness.promtool: {err}", file=sys.stderr)
        sys.exit(1)

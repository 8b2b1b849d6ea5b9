"""The release step: what a release checks and records before it is tagged and shipped.

    python -m harness.release check [--from TAG ...]   (make release-check)
        every patch inside its window today (agent.versions.overdue)
        every supported older version tagged (workflow-<version>)
        an upgrade from each: conversations left at every stage by the tag's own code, finished
            by this code (harness.upgrade)
    python -m harness.release record [TAG]
        a conversation at every stage, left open by TAG's code, its history into
        tests/histories/workflow-<version>/open_<stage>.json (no TAG: this code's, into
        tests/histories/)

Not part of `make test`: the check reads today's date and the release tags, which a fresh clone
in CI may not carry (docs/versioning.md, "Releasing").
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from datetime import date

from agent.versions import PATCHES, SUPPORTED, WORKFLOW_VERSION, overdue
from harness.upgrade import ROOT, problems, record_stages, tag_exists, upgrade_from

HISTORIES = ROOT / "tests" / "histories"


def tag_of(version: str) -> str:
    """The git tag a release of `version` carries."""
    return f"workflow-{version}"


def window_problems(today: date) -> list[str]:
    return [
        f"patch {patch_id!r} is past its window ({PATCHES[patch_id].removable_after()}): "
        "deprecate it, then remove its branch (docs/versioning.md, rule 5)"
        for patch_id in overdue(PATCHES, today)
    ]


# The commit each release shipped from: a clone that came without the tags gets them from here.
RELEASED_AT = {
    "1.0": "825f53809a42f16bee38bca6b5b3ced1dd057402",
    "1.1": "0d95021fe1fe18946fd172d232bcb11c4fdd77f5",
}


def tag_problems() -> list[str]:
    wrong = []
    for version in SUPPORTED:
        tag = tag_of(version)
        if version == WORKFLOW_VERSION or tag_exists(tag):
            continue
        commit = RELEASED_AT.get(version)
        made = commit is not None and subprocess.run(
            ["git", "-C", str(ROOT), "tag", "-a", tag, commit, "-m", f"Workflow {version}"],
            capture_output=True,
        ).returncode == 0
        if not made:
            wrong.append(f"no tag {tag}: `git fetch --tags`, or tag the commit that released it")
    return wrong


async def check(tags: list[str]) -> int:
    began = time.monotonic()
    wrong = window_problems(date.today()) + tag_problems()
    for line in wrong:
        print(f"FAIL {line}")
    if wrong:
        return 1
    for tag in tags:
        finished, took = await upgrade_from(tag)
        for f in finished:
            print(f"{tag} -> {WORKFLOW_VERSION}: {f.stage}: {f.status}, {f.refunds} refund(s)")
        found = problems(finished)
        for line in found:
            print(f"FAIL {tag}: {line}")
        print(f"upgrade from {tag}: {len(finished)} conversations in {took:.1f} s")
        wrong += found
    print(f"release check: {'FAILED' if wrong else 'passed'} in {time.monotonic() - began:.1f} s")
    return 1 if wrong else 0


async def record(tag: str | None) -> int:
    into = HISTORIES / tag if tag else HISTORIES
    stages = await record_stages(tag, into)
    print(f"recorded {', '.join(stages)} into {into.relative_to(ROOT)}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.release")
    commands = parser.add_subparsers(dest="command", required=True)
    checking = commands.add_parser("check", help="windows, tags and an upgrade from each tag")
    checking.add_argument(
        "--from",
        dest="tags",
        action="append",
        help="a tag to upgrade from (default: every supported older version's)",
    )
    recording = commands.add_parser("record", help="histories at every stage, by a tag's code")
    recording.add_argument("tag", nargs="?", help="a release tag (default: this code)")
    args = parser.parse_args(argv)
    if args.command == "check":
        tags = args.tags or [tag_of(v) for v in SUPPORTED if v != WORKFLOW_VERSION]
        return asyncio.run(check(tags))
    return asyncio.run(record(args.tag))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

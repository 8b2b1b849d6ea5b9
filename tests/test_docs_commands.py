"""Every command README.md and docs/ give a reader works as written on a fresh clone.

A fresh clone has `make` and Python; `make setup` (or any other target) puts uv in .tools/ and the
project in .venv/, so the CLI is `.venv/bin/refund-bot` and scripts run with `.venv/bin/python`.
Neither `uv` nor `refund-bot` is on the reader's PATH. This reads the shell blocks and the inline
commands of every page and checks each names a command that exists: a make target make accepts, a
`refund-bot` subcommand that answers --help, a module `python -m` finds, a program on PATH.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_BLOCK = re.compile(r"^```(sh|shell|bash|console)\n(.*?)^```", re.MULTILINE | re.DOTALL)
ANY_BLOCK = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`\n]+)`")
# An inline code span that is a command to type (prose also quotes settings, paths, commands).
COMMAND_START = re.compile(r"^(make|\.venv/bin/|\.tools/bin/|uv|python3?|pip)(\s|$)")
# Inline `refund-bot …` spans name a command in prose; their subcommand must exist.
NAMED_CLI = re.compile(r"^refund-bot\s")
# Not on a fresh clone's PATH, and what to write instead.
NOT_ON_PATH = {
    "uv": "uv lives in .tools/bin: write `make …`, or .venv/bin/refund-bot / .venv/bin/python",
    "refund-bot": "the console script is .venv/bin/refund-bot (after `make setup`)",
    "python": "write .venv/bin/python: the project's packages are installed there",
    "python3": "write .venv/bin/python: the project's packages are installed there",
    "pip": "the environment is locked: `make setup` installs it",
}


def _commands(page: Path) -> list[tuple[str, bool]]:
    """(command, named in prose) for each shell-block line and each inline command span."""
    text = page.read_text()
    found: list[tuple[str, bool]] = []
    for _, body in SHELL_BLOCK.findall(text):
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line and not line.startswith("#"):
                found.append((line, False))
    for span in INLINE.findall(ANY_BLOCK.sub("", text)):
        if COMMAND_START.match(span) or NAMED_CLI.match(span):
            found.append((span, bool(NAMED_CLI.match(span))))
    return found


def _make_targets() -> set[str]:
    makefile = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w.-]*):(?!=)", makefile, re.MULTILINE))


CASES = [(page, *command) for page in PAGES for command in _commands(page)]


def test_the_pages_give_commands_to_check() -> None:
    # The extraction itself works: README's quick start and the CLI's own commands are found.
    readme = [command for command, _ in _commands(REPO / "README.md")]
    assert "make run" in readme and any("refund-bot" in c for c in readme)


@pytest.mark.parametrize(
    ("page", "command", "named"), CASES, ids=[f"{p.name}: {c}" for p, c, _ in CASES]
)
def test_a_documented_command_exists(page: Path, command: str, named: bool) -> None:
    words = shlex.split(command, comments=True)
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]  # NAME=value before the command
    assert words, command
    program, args = words[0], words[1:]
    if named:
        program = ".venv/bin/refund-bot"  # prose naming a subcommand: it must exist
    assert program not in NOT_ON_PATH, f"{page.name}: `{command}`: {NOT_ON_PATH[program]}"

    if program == "make":
        target = next((a for a in args if not a.startswith("-") and "=" not in a), None)
        if target is not None:
            assert target in _make_targets(), f"{page.name}: no make target {target!r}"
        dry = subprocess.run(
            ["make", "-n", "-C", str(REPO), *args], capture_output=True, text=True, timeout=60
        )
        assert dry.returncode == 0, dry.stderr
    elif program == ".venv/bin/refund-bot":
        cli = REPO / program
        assert cli.is_file(), f"{cli} is missing: does `make setup` still install the script?"
        shown = subprocess.run(
            [str(cli), *args, "--help"], capture_output=True, text=True, timeout=60
        )
        assert shown.returncode == 0, f"{page.name}: `{command}`: {shown.stderr}"
        assert shown.stdout.startswith("usage: refund-bot"), shown.stdout
    elif program == ".venv/bin/python" and args[:1] == ["-m"]:
        assert (REPO / program).is_file()
        assert importlib.util.find_spec(args[1]) is not None, f"no module {args[1]}"
    elif "/" in program:
        assert (REPO / program).is_file(), f"{page.name}: no {program}"
    else:
        assert shutil.which(program), f"{page.name}: `{program}` is not a program on PATH"

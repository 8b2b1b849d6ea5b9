"""The dependency rule, read from the code: who may import whom (docs/architecture.md).

    agent/ -> nothing of ours ; bot/ -> agent/ ; worker/ -> agent/ ; demo/ -> the product
    refund_bot/ (the composition root), bench/, harness/, tests/ -> anything

Every import counts, a function's or a TYPE_CHECKING block's too: each one is a module the reader
must know, and a cycle through any of them is still a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
OURS = ("agent", "bot", "worker", "demo", "refund_bot", "harness", "bench", "tests")
# What each package may not import. The product (agent, bot, worker) never imports the demo.
FORBIDDEN = {
    "agent": {"bot", "worker", "demo", "refund_bot", "harness", "bench", "tests"},
    "bot": {"worker", "demo", "refund_bot", "harness", "bench", "tests"},
    "worker": {"bot", "demo", "refund_bot", "harness", "bench", "tests"},
    "demo": {"refund_bot", "harness", "bench", "tests"},
}


def imported(path: Path) -> set[str]:
    """The top-level package of every module `path` imports (absolute imports only)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(OURS)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_only_what_the_rule_allows(package: str) -> None:
    broken = {
        str(path.relative_to(ROOT)): sorted(imported(path) & FORBIDDEN[package])
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {file: names for file, names in broken.items() if names} == {}


def test_relative_imports_are_not_used() -> None:
    """The rule above reads absolute imports; a relative one would slip past it."""
    relative = [
        str(path.relative_to(ROOT))
        for package in FORBIDDEN
        for path in (ROOT / package).rglob("*.py")
        if any(
            isinstance(node, ast.ImportFrom) and node.level > 0
            for node in ast.walk(ast.parse(path.read_text()))
        )
    ]
    assert relative == []

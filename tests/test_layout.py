"""The dependency rule, read from the code: who may import whom (docs/architecture.md).

    agent/ -> nothing of ours ; bot/ -> agent/ ; worker/ -> agent/ ; demo/ -> the product
    refund_bot/ (the composition root) -> the product; demo/ from refund_bot/demos.py only, lazily
    bench/, harness/, tests/ -> anything

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
    "refund_bot": {"harness", "bench", "tests"},
}
PRODUCT = ("agent", "bot", "worker", "refund_bot")


def imported(path: Path, *, eager: bool = False) -> set[str]:
    """The top-level package of every module `path` imports (absolute imports only). `eager`:
    only those imported as the module loads (a function's imports wait for its first call)."""
    found: set[str] = set()
    pending: list[ast.AST] = [ast.parse(path.read_text(), str(path))]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        lazy = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
        if not (eager and isinstance(node, lazy)):
            pending.extend(ast.iter_child_nodes(node))
    return found & set(OURS)


def product_files() -> list[Path]:
    return sorted(path for package in PRODUCT for path in (ROOT / package).rglob("*.py"))


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


def test_the_product_reaches_the_demo_from_one_module_only_and_only_when_asked() -> None:
    """refund_bot/demos.py composes the demo onto the product's hooks, from inside the functions
    a demo or a drill calls: loading the product (a Worker, a bot) loads no demo code."""
    reaching = [str(p.relative_to(ROOT)) for p in product_files() if "demo" in imported(p)]
    eager = [str(p.relative_to(ROOT)) for p in product_files() if "demo" in imported(p, eager=True)]
    assert (reaching, eager) == (["refund_bot/demos.py"], [])

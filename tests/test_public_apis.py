"""The product uses its dependencies' public APIs only: a private module, name or attribute breaks
on the dependency's next release.

    agent/, bot/, worker/, refund_bot/ -> ast -> every `from dep._x import`, imported `_x`,
        `dep_name._x` (through attributes too), class based on a name from a private module
        (and Bolt's `internals` modules)
    -> none, but for STILL_PRIVATE: files still being moved off them, each with its names
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "bot", "worker", "refund_bot")
DEPENDENCIES = {
    "temporalio",
    "slack_bolt",
    "slack_sdk",
    "discord",
    "stripe",
    "openai",
    "aiohttp",
    "opentelemetry",
    "asyncpg",
    "aiosqlite",
    "pydantic",
    "pydantic_settings",
}
_PRIVATE = re.compile(r"^_[^_]")
# Bolt names its internal modules so, without the underscore (slack_bolt.request.async_internals).
_INTERNAL_MODULE = re.compile(r"^_[^_]|^(async_)?internals$")

# Files that still use a dependency's private names, and those names: this list only shrinks
# (an entry no longer needed fails the test too).
STILL_PRIVATE: dict[str, set[str]] = {
    "bot/slack/requests.py": {
        "slack_bolt.adapter.socket_mode.async_internals.send_async_response",
        "slack_bolt.adapter.socket_mode.internals.build_headers",
        "slack_bolt.request.async_internals.build_async_context",
    },
}


def _private(name: str) -> bool:
    return any(_PRIVATE.match(part) for part in name.split("."))


def _private_module(module: str) -> bool:
    return any(_INTERNAL_MODULE.match(part) for part in module.split("."))


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for a chain of names and attributes; None for anything else (a call, a subscript)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def private_names(tree: ast.Module) -> Iterator[str]:
    """Each private name of a dependency the module uses, as written."""
    imported: set[str] = set()  # names bound to a dependency's module or one of its names
    from_private: set[str] = set()  # names bound from a private module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in DEPENDENCIES:
                continue
            for alias in node.names:
                bound = alias.asname or alias.name
                imported.add(bound)
                if _private_module(node.module):
                    from_private.add(bound)
                    yield f"{node.module}.{alias.name}"
                elif _private(alias.name):
                    yield f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in DEPENDENCIES:
                    imported.add(alias.asname or alias.name.split(".")[0])
                    if _private_module(alias.name):
                        yield alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _PRIVATE.match(node.attr):
            dotted = _dotted(node)
            if dotted is not None and dotted.split(".")[0] in imported:
                yield dotted
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                dotted = _dotted(base)
                if dotted is not None and dotted.split(".")[0] in from_private:
                    yield f"class {node.name}({dotted})"


def found() -> dict[str, set[str]]:
    uses: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            names = set(private_names(ast.parse(path.read_text(), str(path))))
            if names:
                uses[str(path.relative_to(ROOT))] = names
    return uses


def test_the_product_uses_no_private_name_of_a_dependency() -> None:
    uses = found()
    outside = {f: names - STILL_PRIVATE.get(f, set()) for f, names in uses.items()}
    assert {f: n for f, n in outside.items() if n} == {}
    # The list only shrinks: a name no longer used leaves it.
    stale = {f: names - uses.get(f, set()) for f, names in STILL_PRIVATE.items()}
    assert {f: n for f, n in stale.items() if n} == {}


def test_the_check_finds_each_kind_of_private_use() -> None:
    code = (
        "import temporalio.worker\n"
        "from temporalio import workflow\n"
        "from aiosqlite.core import _STOP\n"
        "from temporalio.worker._runner import Runner\n"
        "from slack_bolt.request.async_internals import build\n"
        "class Mine(Runner): pass\n"
        "workflow._Definition.name\n"
        "temporalio.worker._inner.thing\n"
        "workflow.info().__name__, workflow.defn\n"
    )
    assert set(private_names(ast.parse(code))) == {
        "aiosqlite.core._STOP",
        "temporalio.worker._runner.Runner",
        "slack_bolt.request.async_internals.build",
        "class Mine(Runner)",
        "workflow._Definition",
        "temporalio.worker._inner",
    }

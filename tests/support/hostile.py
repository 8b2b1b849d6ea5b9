"""What an attacker or a buggy client sends, as hypothesis strategies, and what must never follow.

    a valid payload -> mutated (a field replaced, removed or added, at any depth) -> a surface
    JSON of any shape, header values of any bytes, HTTP that is not HTTP

Every fuzz test of tests/test_hostile_input.py draws from these, derandomized (the same examples
on every run) and bounded, and checks the same two things of the log: no traceback, nothing at
ERROR. Whatever else it checks is the surface's own.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# One profile for every surface: the same examples each run (derandomize), none kept between runs
# (no example database: a failure shrinks and prints its example), no per-example deadline (a
# shared 2-core machine), and a server fixture shared by all the examples of one test.
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Strings that broke something once, or would: past int()'s digit limit, a lone surrogate's
# escape, NUL, an unclosed IPv6 bracket, very long.
NASTY_STRINGS = st.sampled_from(
    ["9" * 5000, "", "\x00", "\u202e", "https://[::1/x", "x" * 3000, "١٢٣", "-1", "1e999", "null"]
)
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
    | NASTY_STRINGS
)
JSON = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)

# JSON by type, for a value of any type but a field's own.
_BY_TYPE: list[tuple[type, st.SearchStrategy[Any]]] = [
    (type(None), st.none()),
    (bool, st.booleans()),
    (int, st.integers(min_value=-(2**70), max_value=2**70)),
    (float, st.floats(allow_nan=False, allow_infinity=False)),
    (str, st.text(max_size=30) | NASTY_STRINGS),
    (list, st.lists(JSON, max_size=3)),
    (dict, st.dictionaries(st.text(max_size=8), JSON, max_size=3)),
]
Path = tuple[str | int, ...]


def paths(value: Any, prefix: Path = ()) -> list[Path]:
    """Every place in a JSON value: each dict key and list index, at any depth."""
    found: list[Path] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            found.append((*prefix, key))
            found += paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found.append((*prefix, index))
            found += paths(inner, (*prefix, index))
    return found


@st.composite
def mutated(
    draw: st.DrawFn, base: dict[str, Any], focus: frozenset[str] = frozenset(), most: int = 3
) -> dict[str, Any]:
    """`base`, copied, with up to `most` changes: a field given a value of another type, or any
    JSON, or removed, or one added beside it. Zero changes too: the valid payload must still
    work among the rest.

    A real payload has dozens of fields (a message's blocks, say); three changes in four go to
    fields whose name is in `focus` (what the platform's readers use), so that those are not
    left to a one-in-eighty chance."""
    value = copy.deepcopy(base)
    for _ in range(draw(st.integers(min_value=0, max_value=most))):
        where = paths(value)
        focused = [p for p in where if p and isinstance(p[-1], str) and p[-1] in focus]
        if focused and draw(st.integers(min_value=0, max_value=3)) > 0:
            where = focused
        if not where:
            break
        path = draw(st.sampled_from(where))
        *parents, last = path
        node: Any = value
        for part in parents:
            node = node[part]
        change = draw(st.sampled_from(["retype", "retype", "replace", "remove", "add"]))
        if change == "retype":  # the same field, a value of another JSON type
            old = type(node[last])
            node[last] = draw(st.one_of([values for t, values in _BY_TYPE if t is not old]))
        elif change == "replace":
            node[last] = draw(JSON)
        elif change == "remove":
            del node[last]
        elif isinstance(node, dict):
            node[draw(st.text(max_size=8))] = draw(JSON)
        else:
            node.append(draw(JSON))
    return value


# Header values as bytes: ASCII, UTF-8, bytes no charset decodes, and very long.
HEADER_BYTES = (
    st.binary(max_size=40).filter(lambda b: b"\r" not in b and b"\n" not in b)
    | st.text(max_size=30).map(lambda t: t.replace("\r", "").replace("\n", "").encode())
    | st.sampled_from([b"\xff\xfe", "tökén".encode(), b"9" * 5000, b"x" * 9000])
)
# What a timestamp header may hold besides a timestamp: digits past int()'s limit, digits that
# are not ASCII, signs, nothing, and any bytes.
TIMESTAMPS = (
    st.sampled_from([b"9" * 5000, b"1" * 13, "١٧٣٢٨٦٠٠٠٠".encode(), b"-1", b"", b"+1", b"1e9"])
    | st.integers(min_value=-(2**64), max_value=2**64).map(lambda n: str(n).encode())
    | HEADER_BYTES
)
CONTENT_ENCODINGS = st.sampled_from([None, None, None, b"gzip", b"deflate", b"br", b"x-what"])
# Whole requests that are not HTTP, or not the HTTP a server takes: each answered 400 (or, as
# the first bytes on a connection, closed: what aiohttp does with a port scanner's TLS hello).
GARBAGE = st.one_of(
    st.binary(min_size=1, max_size=200),
    st.builds(
        lambda path: b"GET /" + path + b" HTTP/1.1\r\nHost: x\r\n\r\n", st.binary(max_size=50)
    ),
    st.just(b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
    st.just(b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"b" * 10_000 + b"\r\n\r\n"),
    st.just(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
    st.just(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"),
    st.just(b"GET / HTTP/9.9\r\n\r\n"),
)


def loud(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What input must never cause: a traceback, or anything at ERROR."""
    return [
        f"{r.levelname} {r.name}: {r.getMessage()[:300]}"
        for r in caplog.records
        if r.exc_info or r.levelno >= logging.ERROR
    ]

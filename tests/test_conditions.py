"""The tests' one way to wait: met in time, it returns what the probe found and keeps how much of
its deadline it used, so the suite's summary names the waits that came close to failing."""

from __future__ import annotations

import time

import pytest

from harness.conditions import CLOSE_CALL, MET, MetWait, close_calls, wait_for


async def test_a_wait_met_late_in_its_deadline_is_named_as_a_close_call() -> None:
    ready_at = time.monotonic() + 0.6
    found = await wait_for(
        lambda: time.monotonic() >= ready_at and "ready", timeout=1.0, what="the late thing"
    )
    assert found == "ready"
    met = MET[-1]
    assert (met.what, met.deadline) == ("the late thing", 1.0)
    assert met.test.endswith("::test_a_wait_met_late_in_its_deadline_is_named_as_a_close_call")
    assert CLOSE_CALL <= met.share < 1
    [line] = close_calls([met])
    assert "the late thing" in line and met.test in line
    MET.remove(met)  # close on purpose: not one for the suite's summary


async def test_a_wait_met_at_once_is_not_a_close_call() -> None:
    assert await wait_for(lambda: "here", timeout=5, what="the ready thing") == "here"
    assert MET[-1].what == "the ready thing"
    assert close_calls([MET[-1]]) == []


def test_close_calls_come_closest_first() -> None:
    waits = [MetWait("a", 6.0, 10, "t::a"), MetWait("b", 19.5, 20, "t::b"), MetWait("c", 1, 10, "")]
    lines = close_calls(waits)
    assert [line.split()[-2] for line in lines] == ["b", "a"]
    assert lines[0].startswith(" 98%")


async def test_a_wait_not_met_fails_naming_what_it_waited_for() -> None:
    before = len(MET)
    with pytest.raises(AssertionError, match=r"timed out after 0.2s waiting for the missing thing"):
        await wait_for(lambda: None, timeout=0.2, what="the missing thing")
    assert len(MET) == before

"""bench.warnings, which counts a benchmark's Worker warnings by kind: lines as the SDK's core
writes them into a Worker's log, colours and all."""

from __future__ import annotations

from bench.warnings import warnings_in


def _core_warning(run_id: str) -> str:
    # The shape of the SDK core's line in worker.log: ANSI colours around each part.
    return (
        "\x1b[2m2026-12-03T22:29:17.083472Z\x1b[0m \x1b[33m WARN\x1b[0m "
        "\x1b[2mtemporalio_sdk_core::worker::workflow\x1b[0m\x1b[2m:\x1b[0m Task not found when "
        "completing \x1b[3merror\x1b[0m\x1b[2m=\x1b[0mcode: 'Some requested entity was not found', "
        'message: "Workflow task not found." '
        f'\x1b[3mrun_id\x1b[0m\x1b[2m=\x1b[0m"{run_id}"'
    )


def test_the_sdk_cores_coloured_warnings_are_counted_as_one_kind_in_plain_words() -> None:
    log = "\n".join(
        [
            _core_warning("01a23e06-b641-7989-8410-972aa1d217b8"),
            "2026-12-03 22:30:02,180 INFO worker.runner: worker polling",
            _core_warning("01a23e06-d1f5-7bb6-b090-757a5252168d"),
        ]
    )
    assert warnings_in(log) == (
        "2 x WARN temporalio_sdk_core::worker::workflow: Task not found when completing "
        "error=code: …, message: … run_id=…"
    )

"""The alert rules, checked by Prometheus' own promtool: valid, and firing on recorded failures.

    manifests/prometheus/refund-bot-alerts.yaml      -> promtool check rules
    manifests/prometheus/refund-bot-alerts.test.yaml -> promtool test rules: each alert on a series
                                                        that shows its failure, and not before

promtool comes from harness.promtool (on PATH, or unpacked from Debian's prometheus package).
That the rules name only metrics refund-bot exports is tests/test_metrics.py's to check.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.promtool import promtool

RULES_DIR = Path(__file__).parent.parent / "manifests" / "prometheus"
RULES = RULES_DIR / "refund-bot-alerts.yaml"
UNIT_TESTS = RULES_DIR / "refund-bot-alerts.test.yaml"
ALERTS = (
    "NoWorkerPolling",
    "InboxDeadLetters",
    "PlatformDown",
    "RefundsFailing",
    "EscalationWaitingPastReminder",
)


@pytest.fixture(scope="module")
def tool() -> Path:
    return promtool()


def run(tool: Path, *args: str, cwd: Path = RULES_DIR) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_rules_are_valid(tool: Path) -> None:
    done = run(tool, "check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout


def test_each_alert_fires_on_its_recorded_failure_and_not_before(tool: Path) -> None:
    for alert in ALERTS:
        assert f"alertname: {alert}" in UNIT_TESTS.read_text(), f"{alert} has no unit test"
    done = run(tool, "test", "rules", UNIT_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_unit_tests_catch_a_rule_that_fires_late(tool: Path, tmp_path: Path) -> None:
    shutil.copy(UNIT_TESTS, tmp_path)
    late = RULES.read_text().replace("for: 5m", "for: 15m")  # PlatformDown's patience
    assert late != RULES.read_text()
    (tmp_path / RULES.name).write_text(late)
    done = run(tool, "test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert done.returncode != 0 and "PlatformDown" in done.stdout + done.stderr

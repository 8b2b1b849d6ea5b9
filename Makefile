# Two commands on a fresh machine with Python 3.11+ and make: `make run` and `make test`.
# Every target bootstraps uv (pinned, from PyPI, into .tools/) and the project's locked .venv
# first; `make setup` (the default) does only that. The CLI is then .venv/bin/refund-bot.

UV_VERSION := 0.13.9
PYTHON ?= python3
UV := .tools/bin/uv
# Prometheus' rule checker, for tests/test_alerts.py: unpacked from Debian's prometheus package
# (harness/promtool.py) unless one is on PATH.
PROMTOOL := .tools/bin/promtool
export UV_PYTHON_DOWNLOADS := never
# The suite mostly waits on servers, so four processes share two cores well; each has its own
# Temporal dev server and PostgreSQL (tests/conftest.py's session fixtures).
TEST_WORKERS ?= 4

.DEFAULT_GOAL := setup
.PHONY: setup run demo demo-side-by-side test release-check lint bench bench-quick clean

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet "uv==$(UV_VERSION)"

.venv/.synced: $(UV) pyproject.toml uv.lock
	$(UV) sync --locked --python $(PYTHON)
	touch $@

setup: .venv/.synced  ## uv in .tools/, the locked environment in .venv/: .venv/bin/refund-bot --help

run: .venv/.synced  ## the main job: embedded Temporal, supervised Worker, platforms (local by default)
	$(UV) run --locked refund-bot run

demo: .venv/.synced  ## the unattended story, start to finish
	$(UV) run --locked refund-bot demo

demo-side-by-side: .venv/.synced  ## the same crash without and with Temporal, in two threads
	$(UV) run --locked refund-bot demo --side-by-side

$(PROMTOOL): | .venv/.synced
	$(UV) run --locked python -m harness.promtool

test: .venv/.synced $(PROMTOOL)  ## mypy over every package, then the whole suite on a real Temporal dev server
	$(UV) run --locked mypy
	$(UV) run --locked pytest -n $(TEST_WORKERS) --dist loadfile

# The release step (docs/versioning.md): every patch inside its window today, every supported older
# version tagged (workflow-<version>), and an upgrade from each tag's own code to this one. Minutes;
# it needs the tags (`git fetch --tags`), so it is not part of `make test`.
release-check: .venv/.synced  ## the release step: patch windows, tags, and the upgrade from each tag
	$(UV) run --locked python -m harness.release check

lint: .venv/.synced
	$(UV) run --locked ruff check .

# The reference demo the throughput and history figures compare with is cloned into .bench/
# (gitignored) at the commit bench/all.py pins; each run's output lands in .bench/results/.
bench: .venv/.synced  ## every benchmark docs/benchmarks.md quotes, full size (hours), and its plots
	$(UV) run --locked python -m bench.all

bench-quick: .venv/.synced  ## every benchmark small (minutes): the same figures and plots, rougher
	$(UV) run --locked python -m bench.all --quick

clean:
	rm -rf .venv .tools .data

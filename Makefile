# Two commands on a fresh machine: `make demo` and `make test`. Each bootstraps .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The distribution packages the tests use, as COMMAND=PACKAGE (see .ci/packages); bubblewrap
# for bench/rootless.py, which tests/test_bench_quick.py runs once, small, with every benchmark.
TEST_PACKAGES := chromium=chromium nats-server=nats-server bwrap=bubblewrap
# The tests `make test` runs by themselves, after the rest: they measure the whole host (the
# memory bound: MemAvailable while a bomb runs), which another worker's tests would move.
TEST_ALONE := tests/test_memory_bound.py

.PHONY: demo test test-unprivileged check bench docs console-shots clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	MCPX_HOOKS_NO_DISCOVERY=1 $(BIN)/mcpx-hooks demo

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict supervisor runners
	$(BIN)/python .ci/lint-imports

test: check
	@# The distribution packages the tests need (TEST_PACKAGES), installed when root and missing.
	@.ci/packages $(TEST_PACKAGES)
	@# What enforces the sandbox profiles here (informational; the tests assert it).
	-$(BIN)/mcpx-hooks doctor
	@# On two workers (pytest-xdist), each taking whole modules (a module's fixtures start once
	@# and its tests keep their order): the suite mostly waits on processes and sockets. Then
	@# TEST_ALONE with nothing beside it. The slowest 25 tests end each log.
	$(BIN)/pytest -W error -n 2 --dist loadfile --durations=25 $(TEST_ALONE:%=--ignore=%)
	$(BIN)/pytest -W error --durations=25 $(TEST_ALONE)
	@# As root, the sandbox tests again as an ordinary user (rootless); an ordinary user's
	@# run above was rootless already.
	@if [ "$$(id -u)" = 0 ]; then .ci/unprivileged; fi

# The sandbox tests again as an ordinary user (UNPRIVILEGED_USER, default nobody): rootless.
test-unprivileged: $(STAMP)
	.ci/unprivileged

bench: $(STAMP)
	@# bench/rootless.py compares with bubblewrap, bench/console.py drives Chromium: installed
	@# here when root and missing.
	@.ci/packages bwrap=bubblewrap chromium=chromium
	$(BIN)/python bench/run_all.py

docs: $(STAMP)
	$(BIN)/python -m mcpx_hooks.supervisor.cli.reference --write docs

# The console's screenshots in docs/console/, taken by its browser tests in headless Chromium.
console-shots: $(STAMP)
	@.ci/packages chromium=chromium
	MCPX_CONSOLE_SHOTS=docs/console $(BIN)/pytest -W error -q tests/test_console_browser.py \
		tests/test_console_terminal.py

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache

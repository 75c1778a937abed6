# Every target creates .venv if missing and installs what it needs, so a fresh
# machine with only Python and pip runs `make demo` or `make test` directly.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# A path-based editable install (a .pth naming the checkout, which the symlinks under
# actorflow/ make importable as one package), not setuptools' default import hook, which
# type checkers cannot follow: mypy on code outside the checkout finds actorflow.
EDITABLE := --config-settings editable_mode=compat

.PHONY: demo test lint typecheck unit examples bench fuzz torture pictures clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The Makefile too: a changed recipe re-installs a .venv made by the old one.
$(STAMP): pyproject.toml Makefile | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(EDITABLE) -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy -p actorflow
	$(BIN)/mypy tests
	$(BIN)/mypy --allow-any-generics examples bench fuzz torture  # examples write plain `af.Context`, as users do

# The suite under coverage.py, in parts run at once (.ci/unit.sh), then the package's
# line coverage (files at 100% left out).
unit: $(STAMP)
	bash .ci/chromium.sh
	bash .ci/unit.sh

examples: $(STAMP)
	$(BIN)/python examples/run_all.py

# Without a PostgreSQL server to test against, `make test` starts a throwaway one
# (.ci/postgres.sh) around the whole run.
ifeq ($(ACTORFLOW_TEST_PG_DSN)$(ACTORFLOW_TEST_PG_UNAVAILABLE),)
test: $(STAMP)
	bash .ci/postgres.sh $(MAKE) test
else
test: lint typecheck unit examples
endif

bench: $(STAMP)
	bash .ci/postgres.sh $(BIN)/python bench/run_all.py

# The README's pictures (docs/inspector.png, docs/inspector-failed.png, docs/trace.png), taken by the browser tests.
pictures: $(STAMP)
	bash .ci/chromium.sh
	ACTORFLOW_REFRESH_PICTURES=1 $(BIN)/python -m pytest -q tests/test_ui_browser.py

# The long fuzz run (docs/fuzzing.md); failing inputs land in tests/fuzz_corpus/.
FUZZ_INPUTS ?= 100000
fuzz: $(STAMP)
	nice $(BIN)/python -m fuzz.run --inputs $(FUZZ_INPUTS) --json fuzz-report.json

# The torture harness (docs/torture.md) for as long as asked: random workflows, faults,
# crashes and concurrency on every store; failing trials land in tests/torture_corpus/,
# which `make test` replays. TORTURE_ARGS="--replay sqlite:12" runs one trial again.
TORTURE_SECONDS ?= 900
TORTURE_ARGS ?=
torture: $(STAMP)
	bash .ci/postgres.sh $(BIN)/python -m torture.run --seconds $(TORTURE_SECONDS) \
		--corpus tests/torture_corpus $(TORTURE_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache .coverage

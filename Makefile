# Two commands do all the set-up on a fresh machine:
#   make serve   -- create .venv, install, serve the embedded default tokenizer on 127.0.0.1:8000
#   make test    -- create .venv, install, run the whole test suite (what CI runs)
#   make test-fast -- the suite without the tests marked slow (builds, whole jobs, browsers, benchmarks): for
#                   development; CI runs them all
# And for maintainers:
#   make lint    -- ruff (lint + format check), mypy, import boundaries (CI runs it too)
#   make emulators -- Azurite (the Azure Storage emulator, npm) under .cache/azurite, for the az:// tests (CI runs it)
#   make docs    -- build the docs site into build/site/ (--strict; open build/site/index.html, offline too)
#   make fmt     -- apply ruff's fixes and formatting
#   make bench   -- the side-by-side benchmark (ARGS=--smoke for a quick check)
#   make fuzz    -- the OpenAPI fuzzer with 2,000 examples per operation (the suite runs 40)
#   make mutants -- the mutation check: every curated one-line bug in service/ must fail a test (~50 min)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LINTED := service tests testkit benchmarks scripts examples deploy

.PHONY: serve test test-fast lint fmt docs bench fuzz mutants install clean emulators

# Set-up says what it does as it goes: a line per step, then pip's own line per package (no --quiet).
$(STAMP): pyproject.toml
	@echo "==> [1/3] creating $(VENV)/ with $(PYTHON) and upgrading pip"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@echo "==> [2/3] torch==2.13.0, the CPU build (pinned: any looser spec downloads multi-GB CUDA builds)"
	$(BIN)/pip install --progress-bar on torch==2.13.0
	@echo "==> [3/3] this package with the extras make test and make lint need: about 150 packages (pip says nothing while it unpacks them at the end: 1-2 min)"
	$(BIN)/pip install --progress-bar on -e '.[test,lint]'
	touch $(STAMP)
	@echo "==> set up: $(VENV)/ ('source $(VENV)/bin/activate' to use its commands)"

install: $(STAMP)

# The object-store emulators that are not Python packages (testkit/objectstore.py finds them here); moto and
# gcp-storage-emulator come with the test extra. Needs node and npm (Debian: apt-get install nodejs npm).
AZURITE := azurite@3.37.0
AZURITE_STAMP := .cache/azurite/.$(AZURITE)
$(AZURITE_STAMP):
	npm install --prefix .cache/azurite --no-audit --no-fund --loglevel=error $(AZURITE)
	touch $(AZURITE_STAMP)

emulators: $(AZURITE_STAMP)
# `make test` installs Azurite too where npm is (without it the az:// tests skip, saying so; in CI they fail)
TEST_NEEDS := $(STAMP) $(if $(shell command -v npm),$(AZURITE_STAMP))

serve: $(STAMP)
	$(BIN)/tokenizer-service serve $(ARGS)

# The suite runs in TEST_PROCESSES pytest processes (pytest-xdist), a test module each at a time (module-scoped
# servers and venvs are made once): most of a test's time is a server, a job or a venv at work, so three
# processes keep two cores busy. TEST_PROCESSES=0 runs it in this one process.
TEST_PROCESSES ?= 3
PYTEST := RUST_BACKTRACE=0 $(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile

test: $(TEST_NEEDS)
	$(PYTEST) $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m scripts.import_cycles

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

fmt: $(STAMP)
	$(BIN)/ruff check --fix $(LINTED)
	$(BIN)/ruff format $(LINTED)

fuzz: $(STAMP)
	FUZZ_EXAMPLES=2000 RUST_BACKTRACE=0 $(BIN)/python -m pytest -q tests/test_fuzz.py

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run $(ARGS)

mutants: $(STAMP)
	TEST_PROCESSES=$(TEST_PROCESSES) RUST_BACKTRACE=0 $(BIN)/python -m scripts.mutants $(ARGS)

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis .mypy_cache .ruff_cache

# Two commands do all the set-up on a fresh machine:
#   make serve   -- create .venv, install what serving needs (the server extra), serve the embedded default
#                   tokenizer on 127.0.0.1:8000
#   make test    -- add torch and the test extra to that .venv, run the whole test suite (what CI runs)
#   make test-fast -- the suite without the tests marked slow (builds, whole jobs, browsers, benchmarks): for
#                   development; CI runs them all
# And for maintainers:
#   make lint    -- ruff (lint + format check), mypy, import boundaries (CI runs it too); adds the lint tools
#   make emulators -- Azurite (the Azure Storage emulator, npm) under .cache/azurite, for the az:// tests (CI runs it)
#   make docs    -- build the docs site into build/site/ (--strict; open build/site/index.html, offline too); adds
#                   the docs tools
#   make install -- all of the set-up above at once (what CI does first)
#   make fmt     -- apply ruff's fixes and formatting
#   make bench   -- the side-by-side benchmark (ARGS=--smoke for a quick check)
#   make fuzz    -- the OpenAPI fuzzer with 2,000 examples per operation (the suite runs 40)
#   make mutants -- the mutation check: every curated one-line bug in service/ must fail a test (~50 min)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LINTED := service tests testkit benchmarks scripts examples deploy

.PHONY: serve test test-fast lint fmt docs bench fuzz mutants install clean emulators

# The set-up is made in steps into one venv, each once and recorded by its stamp in $(VENV)/: make serve needs
# only the server extra; make test, make lint and make docs each add what they need beside it. Set-up says what
# it does as it goes: a line per step, then pip's own line per package (no --quiet). One pip at a time in the
# venv, whatever make -j runs beside it (flock, where the system has it).
CREATED := $(VENV)/.created
SERVER_STAMP := $(VENV)/.installed-server
TEST_STAMP := $(VENV)/.installed-test
LINT_STAMP := $(VENV)/.installed-lint
DOCS_STAMP := $(VENV)/.installed-docs
PIP := $(if $(shell command -v flock),flock $(VENV)/.pip-lock) $(BIN)/pip
# --no-compile: Python writes a module's bytecode when it is first imported (as uv installs by default); compiling
# all ~19,000 files of the set-up at install costs about a CPU-minute, for modules most of which nothing imports.
# That holds only where bytecode may be written: with PYTHONDONTWRITEBYTECODE set (Python images set it, and so do
# the machines this project is developed on) every process would compile every module it imports again (a server's
# start: 4.4 CPU-s from source, 2.2 from bytecode), so no recipe here inherits it.
unexport PYTHONDONTWRITEBYTECODE
INSTALL := $(PIP) install --progress-bar on --no-compile

$(CREATED):
	@echo "==> creating $(VENV)/ with $(PYTHON) and upgrading pip"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	touch $(CREATED)

$(SERVER_STAMP): pyproject.toml $(CREATED)
	@echo "==> [serve] this package with the server extra, what serving needs (about 40 packages, no torch: ~30 s)"
	$(INSTALL) -e '.[server]'
	touch $(SERVER_STAMP)
	@echo "==> set up to serve: $(VENV)/ ('source $(VENV)/bin/activate' to use its commands)"

$(TEST_STAMP): pyproject.toml $(SERVER_STAMP)
	@echo "==> [test 1/2] torch==2.13.0, the CPU build (pinned: any looser spec downloads multi-GB CUDA builds)"
	$(INSTALL) torch==2.13.0
	@echo "==> [test 2/2] the test extra: about 110 packages more (pip says nothing while it unpacks them at the end: 1-2 min)"
	$(INSTALL) -e '.[test]'
	touch $(TEST_STAMP)

$(LINT_STAMP): pyproject.toml $(SERVER_STAMP)
	@echo "==> [lint] ruff, mypy, import-linter, and the typed packages mypy reads (httpx, hypothesis)"
	$(INSTALL) -e '.[server,httpx,lint]'
	touch $(LINT_STAMP)

$(DOCS_STAMP): pyproject.toml $(SERVER_STAMP)
	@echo "==> [docs] MkDocs, Material and mkdocstrings"
	$(INSTALL) -e '.[server,docs]'
	touch $(DOCS_STAMP)

install: $(TEST_STAMP) $(LINT_STAMP) $(DOCS_STAMP)

# The object-store emulators that are not Python packages (testkit/objectstore.py finds them here); moto and
# gcp-storage-emulator come with the test extra. Needs node and npm (Debian: apt-get install nodejs npm).
AZURITE := azurite@3.37.0
AZURITE_STAMP := .cache/azurite/.$(AZURITE)
$(AZURITE_STAMP):
	npm install --prefix .cache/azurite --no-audit --no-fund --loglevel=error $(AZURITE)
	touch $(AZURITE_STAMP)

emulators: $(AZURITE_STAMP)
# `make test` installs Azurite too where npm is (without it the az:// tests skip, saying so; in CI they fail)
TEST_NEEDS := $(TEST_STAMP) $(if $(shell command -v npm),$(AZURITE_STAMP))

serve: $(SERVER_STAMP)
	$(BIN)/tokenizer-service serve $(ARGS)

# The suite runs in TEST_PROCESSES pytest processes (pytest-xdist), a test module each at a time (module-scoped
# servers and venvs are made once): most of a test's time is a server, a job or a venv at work, so three
# processes keep two cores busy. TEST_PROCESSES=0 runs it in this one process. Modules are handed out in the order
# tests/conftest.py puts them (the longest first); --no-loadscope-reorder keeps xdist from re-sorting them by their
# count of tests, which sent the few-test, minutes-long modules (benchmark smokes, venvs) out last.
TEST_PROCESSES ?= 3
PYTEST := RUST_BACKTRACE=0 $(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder

test: $(TEST_NEEDS)
	$(PYTEST) $(PYTEST_ARGS)

test-fast: $(TEST_STAMP)
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

lint: $(LINT_STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m scripts.import_cycles

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

fmt: $(LINT_STAMP)
	$(BIN)/ruff check --fix $(LINTED)
	$(BIN)/ruff format $(LINTED)

fuzz: $(TEST_STAMP)
	FUZZ_EXAMPLES=2000 RUST_BACKTRACE=0 $(BIN)/python -m pytest -q tests/http/test_fuzz.py

bench: $(TEST_STAMP)
	$(BIN)/python -m benchmarks.run $(ARGS)

mutants: $(TEST_STAMP)
	TEST_PROCESSES=$(TEST_PROCESSES) RUST_BACKTRACE=0 $(BIN)/python -m scripts.mutants $(ARGS)

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis .mypy_cache .ruff_cache

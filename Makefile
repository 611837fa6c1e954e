# Two commands do all the set-up on a fresh machine:
#   make serve   -- create .venv, install, serve the embedded default tokenizer on 127.0.0.1:8000
#   make test    -- create .venv, install, run the whole test suite (what CI runs)
#   make test-fast -- the suite without the tests marked slow (builds, whole jobs, browsers, benchmarks): for
#                   development; CI runs them all
# And for maintainers:
#   make lint    -- ruff (lint + format check), mypy, import boundaries (CI runs it too)
#   make docs    -- build the docs site into build/site/ (--strict; open build/site/index.html, offline too)
#   make fmt     -- apply ruff's fixes and formatting
#   make bench   -- the side-by-side benchmark (ARGS=--smoke for a quick check)
#   make fuzz    -- the OpenAPI fuzzer with 2,000 examples per operation (the suite runs 40)
#   make mutants -- the mutation check: every curated one-line bug in service/ must fail a test (~25 min)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LINTED := service tests testkit benchmarks scripts examples deploy

.PHONY: serve test test-fast lint fmt docs bench fuzz mutants install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: this exact CPU wheel is on the machine; any looser spec downloads CUDA builds
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test,lint]'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/tokenizer-service serve $(ARGS)

test: $(STAMP)
	RUST_BACKTRACE=0 $(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP)
	RUST_BACKTRACE=0 $(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	$(BIN)/lint-imports

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
	RUST_BACKTRACE=0 $(BIN)/python -m scripts.mutants $(ARGS)

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis .mypy_cache .ruff_cache

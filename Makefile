# Two commands do all the set-up on a fresh machine:
#   make serve   -- create .venv, install, serve the embedded default tokenizer on 127.0.0.1:8000
#   make test    -- create .venv, install, run the whole test suite (what CI runs)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: serve test bench install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: this exact CPU wheel is on the machine; any looser spec downloads CUDA builds
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/tokenizer-service serve $(ARGS)

test: $(STAMP)
	RUST_BACKTRACE=0 $(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run $(ARGS)

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis

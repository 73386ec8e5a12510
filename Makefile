# Two commands on a fresh machine:
#   make quickstart   set up .venv and run the whole pipeline on the built-in task
#   make test         set up .venv and run the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv quickstart test lint benchmarks clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	# The CPU build of torch first: a bare range would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install "torch==2.13.0"
	$(BIN)/python -m pip install -e ".[test]"
	touch $(STAMP)

venv: $(STAMP)

quickstart: $(STAMP)
	$(BIN)/attndeploy quickstart

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check attndeploy tests benchmarks

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/train.py

clean:
	rm -rf $(VENV) model_repository quickstart runs

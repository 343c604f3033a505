# Two commands on a fresh machine:  `make serve`  and  `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: serve test lint bench install clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/gateway serve

lint: $(STAMP)
	$(BIN)/ruff check gateway engines evals tests
	$(BIN)/ruff format --check gateway
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m evals.bench.micro
	$(BIN)/python -m evals.bench.proxy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

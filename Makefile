# One target per task; CI (.ci/run) calls `make test`, as the README says.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install test lint bench clean

$(BIN)/semsearch: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(BIN)/semsearch

install: $(BIN)/semsearch

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check semsearch tests bench
	$(BIN)/ruff format --check semsearch tests bench
	$(BIN)/mypy

bench: install
	$(BIN)/python bench/latency.py --chunks 10000

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

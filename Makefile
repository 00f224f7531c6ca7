# One target per task; CI (.ci/run) calls `make test`, as the README says.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install test lint bench bench-full clean

$(BIN)/semsearch: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,lancedb]"
	touch $(BIN)/semsearch

install: $(BIN)/semsearch

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check semsearch tests bench scripts
	$(BIN)/ruff format --check semsearch tests bench scripts
	$(BIN)/mypy

# Quick set (a few minutes once the SciFact index exists); bench/README.md explains each script.
EVAL ?= ../shared/eval
BENCH_WORK ?= /tmp/semsearch-bench

bench: install
	bash bench/corpora.sh $(BENCH_WORK)/corpora
	$(BIN)/python bench/throughput.py $(BENCH_WORK)/corpora/requests
	$(BIN)/python bench/latency.py --chunks 10000
	$(BIN)/python bench/quality.py $(EVAL)/scifact --reuse-index --limit-queries 100

# Everything in bench/RESULTS.md (an hour or more on 2 cores; codesearch needs its fetch.sh first).
bench-full: install
	bash bench/corpora.sh $(BENCH_WORK)/corpora
	$(BIN)/python bench/throughput.py $(BENCH_WORK)/corpora/requests
	$(BIN)/python bench/throughput.py $(BENCH_WORK)/corpora/cpython-mix
	$(BIN)/python bench/latency.py --chunks 10000 --chunks 100000
	$(BIN)/python bench/latency.py --backend lancedb --chunks 100000 --chunks 1000000
	$(BIN)/python bench/quality.py $(EVAL)/scifact
	bash $(EVAL)/codesearch/fetch.sh --dest $(BENCH_WORK)/codesearch-repos
	bash $(EVAL)/codebench-wide/unpack.sh --force $(BENCH_WORK)/codebench-wide-repos
	$(BIN)/python bench/codesearch.py $(EVAL)/codesearch $(EVAL)/codebench-wide \
		--repos $(BENCH_WORK)/codesearch-repos --repos $(BENCH_WORK)/codebench-wide-repos
	bash bench/footprint.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

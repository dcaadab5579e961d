# Two commands do all set-up: `make demo` and `make test`.
# Each creates (or reuses) a local virtual environment in .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,cluster]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tokenfactory demo

# The whole suite, slow tests included; `make test-fast` skips those marked slow.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m "slow or not slow"

test-fast: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info

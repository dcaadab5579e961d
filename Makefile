# Two commands do all set-up: `make demo` and `make test`.
# Each creates (or reuses) a local virtual environment in .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The modules with a Cython .pxd beside them are compiled at install (setup.py,
# native/__init__.py): a change to one of them, or to its .pxd, installs again.
PACKAGES := costmodel orchestrator storage traces workers
PXD := $(foreach p,$(PACKAGES),$(wildcard $(p)/*.pxd $(p)/*/*.pxd $(p)/*/*/*.pxd))
NATIVE_SOURCES := $(PXD) $(PXD:.pxd=.py)

.PHONY: demo test test-fast lint bench build clean

$(STAMP): pyproject.toml setup.py $(NATIVE_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,cluster,measured]'
	touch $(STAMP)

build: $(STAMP)

demo: $(STAMP)
	$(BIN)/tokenfactory demo

# The whole suite, slow tests included, on TEST_WORKERS processes (pytest-xdist; the
# slow tests are spread by work stealing); `make test TEST_WORKERS=0` runs it in one.
# Three on a 2-core machine: the live-mode tests mostly wait on real time, and a third
# process uses the core they leave idle (pytest 486 s on 2 processes, 398 s on 3, a
# quiet 2-core machine). `make test-fast` skips those marked slow.
TEST_WORKERS ?= 3
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m "slow or not slow" -n $(TEST_WORKERS) --dist worksteal

test-fast: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
	find $(PACKAGES) -name '*.so' -delete
	rm -f $(PXD:.pxd=.c)

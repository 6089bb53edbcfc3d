# Lockstep developer entry points. `make demo` and `make test` work on a fresh machine
# with Python 3.11+: they create .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: setup  ## the main job on an embedded default: pin, verify and rug-pull the example server
	$(BIN)/python examples/demo.py

test: setup  ## the whole test suite (what CI runs)
	$(BIN)/pytest

bench: setup  ## every benchmark; each prints a table (see bench/*.py --help for options)
	$(BIN)/python bench/digest.py
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/sidecar_footprint.py
	$(BIN)/python bench/operator.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis

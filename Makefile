# Lockstep developer entry points. `make demo` and `make test` work on a fresh machine
# with Python 3.11+: they create .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: setup demo test bench clean

setup: $(VENV)/.installed

$(BIN)/python:
	@echo "creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The demo installs Lockstep and the few packages its stand-ins need (no test toolchain), one line a package.
$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	@echo "installing Lockstep and what the demo needs (about 70 packages, one line each)…"
	$(BIN)/pip install -e '.[demo]' 2>&1 | grep -E --line-buffered '^(Collecting|Successfully installed|ERROR)' \
		| sed -u -e 's/^Collecting /  + /' -e 's/^Successfully installed .*/  done./'
	touch $@

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@echo "installing Lockstep with its test toolchain…"
	$(BIN)/pip install -e '.[test]' 2>&1 | grep -E --line-buffered '^(Collecting|Successfully installed|ERROR)' \
		| sed -u -e 's/^Collecting /  + /' -e 's/^Successfully installed .*/  done./'
	touch $@ $(VENV)/.demo-installed

demo: $(VENV)/.demo-installed  ## the main job: the whole loop on a real control plane (KUBEBUILDER_ASSETS) or kmock
	$(BIN)/lockstep demo

test: setup  ## the whole test suite (what CI runs)
	$(BIN)/pytest

bench: setup  ## every benchmark; each prints a table (see bench/*.py --help for options)
	$(BIN)/python bench/digest.py
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/sidecar_footprint.py
	$(BIN)/python bench/operator.py
	$(BIN)/python bench/notification_flood.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis

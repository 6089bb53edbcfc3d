# Lockstep developer entry points. `make demo` and `make test` work on a fresh machine
# with Python 3.11+: they create .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: setup demo test bench fuzz image clean

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

# Tests wait on processes and timers more than they compute: more workers than cores pay. The real
# control-plane tiers run on one worker each (xdist_group in tests/envtest and tests/faults).
TEST_WORKERS ?= 6

test: setup  ## the whole test suite (what CI runs), in TEST_WORKERS processes (TEST_WORKERS=0: one)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup

bench: setup  ## every benchmark; each prints a table (see bench/*.py --help for options)
	$(BIN)/python bench/digest.py
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/sidecar_footprint.py
	$(BIN)/python bench/operator.py
	$(BIN)/python bench/notification_flood.py

FUZZ_SECONDS ?= 60
FUZZ_TARGETS := canonical interface manifest report admission report-body cli-file

fuzz: setup  ## coverage-guided fuzzing (atheris), FUZZ_SECONDS per target; crashes land in fuzz/crashes/
	$(BIN)/pip install -q atheris
	mkdir -p fuzz/crashes
	for target in $(FUZZ_TARGETS); do \
		echo "fuzzing $$target for $(FUZZ_SECONDS)s"; \
		$(BIN)/python fuzz/run.py $$target -max_total_time=$(FUZZ_SECONDS) -max_len=8192 \
			-artifact_prefix=fuzz/crashes/$$target- || exit 1; \
	done

image:  ## the product image from ./Dockerfile, without docker (buildah on a Debian base; root): dist/lockstep-oci.tar
	tools/image/build.sh

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis

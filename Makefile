# The two commands a new machine needs (see README.md):
#   make demo   - set everything up, then run the demo on the embedded local default
#   make test   - set everything up, then run lint, type checks and the whole test suite
# Both are idempotent: the virtualenv and the control-plane binaries are made once and reused.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test setup controlplane lint unit conformance crds help

demo: setup controlplane
	$(BIN)/machinepool demo $(DEMO_ARGS)

test: setup controlplane lint
	$(BIN)/pytest $(PYTEST_ARGS)

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

controlplane:
	@bash hack/controlplane/build.sh >/dev/null

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: setup
	$(BIN)/pytest tests/unit

# Our core against upstream Cluster API's core manager, scenario by scenario (also in `test`).
conformance: setup controlplane
	$(BIN)/pytest tests/conformance

crds: setup
	$(BIN)/python -m machinepool.api.crdgen

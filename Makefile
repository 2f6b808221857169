# The two commands a new machine needs (see README.md):
#   make demo   - set everything up, then run the demo on the embedded local default
#   make test   - set everything up, then run lint, type checks and the whole test suite
#                 (with the real cluster-autoscaler and clusterctl when they can be had)
# Both are idempotent: the virtualenv and the control-plane binaries are made once and reused.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test setup controlplane clients lint unit crds help

demo: setup controlplane
	$(BIN)/machinepool demo $(DEMO_ARGS)

test: setup controlplane clients lint
	$(BIN)/pytest $(PYTEST_ARGS)

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

controlplane:
	@bash hack/controlplane/build.sh >/dev/null

# The real clients some tests run (cluster-autoscaler, clusterctl), built once into the cache
# before the session so no test pays a cold build; one that cannot be had is skipped here, and
# the session leaves its tests out with a one-line note (tests/conftest.py).
clients:
	@for tool in autoscaler clusterctl; do \
	  if bash hack/$$tool/build.sh --check; then bash hack/$$tool/build.sh >/dev/null || exit 1; fi; \
	done

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: setup
	$(BIN)/pytest tests/unit

crds: setup
	$(BIN)/python -m machinepool.api.crdgen

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

.PHONY: demo test setup controlplane clients image test-image lint unit conformance crds help

demo: setup controlplane
	$(BIN)/machinepool demo $(DEMO_ARGS)

# The suite waits on controllers far more than it computes (a quarter of a core on average in
# the reliability tier), so two pytest-xdist workers run its files side by side.
# Files go out in collection order (tests/conftest.py: longest suites first), not pytest-xdist's
# default of most tests first, which left the reliability files, a few long tests each, to the end.
TEST_WORKERS ?= 2

test: setup controlplane clients test-image lint
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30 $(PYTEST_ARGS)

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

controlplane:
	@bash hack/controlplane/build.sh >/dev/null

# The real clients some tests run (cluster-autoscaler, clusterctl, cert-manager with the helm
# that renders its chart, upstream Cluster API's core
# and kubeadm bootstrap managers for the beside-upstream and conformance tests, and Cluster API
# Provider AWS's manager for the CAPA-under-our-core test), built once
# into the cache before the session so no test pays a cold build; a client that cannot be had
# is skipped here, and the session leaves its tests out with a one-line note (tests/conftest.py).
clients:
	@for tool in autoscaler clusterctl certmanager; do \
	  if bash hack/$$tool/build.sh --check; then bash hack/$$tool/build.sh >/dev/null || exit 1; fi; \
	done
	@for target in manager bootstrap controlplane capa; do \
	  bash bench/upstream/build.sh $$target >/dev/null || exit 1; \
	done

# The controller image, built offline into ~/.cache/machinepool/images (hack/image/build.sh:
# Debian packages, the wheel and its PyPI dependencies, no registry; needs root). Prints its size.
image: setup
	@bash hack/image/build.sh

# Before the session, as for the clients: built when it can be, else one line says why, and the
# session leaves the image's tests out with a note. The previous release's image too (the one
# `clusterctl upgrade` is tested from: deploy/releases.yaml).
test-image: setup
	@for name in machinepool machinepool-previous; do \
	  if bash hack/image/build.sh --check $$name; then bash hack/image/build.sh $$name || exit 1; fi; \
	done

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

# Two entry points (see README): `make dev` runs the embedded stack, `make test` runs every check.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The end-to-end sessions' workflow histories, for the replay tests (tests/histories.py).
E2E_HISTORIES := .pytest_cache/e2e-histories

.PHONY: setup dev demo test lint typecheck unit controlplane helm clean

setup: $(VENV)/.installed

# The product with its dev extra, and the simulator (its own distribution, never in the product's
# wheel or image) beside it: one resolve, so the simulator's `cloudburst` is this checkout.
$(VENV)/.installed: pyproject.toml simulator/pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e ./simulator
	@touch $@

dev: controlplane
	$(BIN)/cloudburst dev

demo: controlplane
	$(BIN)/cloudburst demo --scenario lifecycle

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy
	$(BIN)/mypy bench  # scripts, not a package: checked on their own

# The fast lane: every test that needs no running stack — models, decisions, planning, CLI
# output, the manifests, and workflow logic with stand-in activities on one Temporal dev server
# per process (and a time-skipping one where a test skips retries' backoffs). CLOUDBURST_FAST_LANE makes a test that asks for a simulated cluster fail
# (tests/conftest.py); `slow` ones (real process kills, hundreds of claims) run in `make test`.
unit: setup helm
	CLOUDBURST_FAST_LANE=1 $(BIN)/pytest -n 2 -m "not slow" tests/unit tests/workflows tests/deploy

# Kubernetes' own control plane (kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl), etcd and KWOK, which the end-to-end tests run on: built from their Go modules
# (simulator/controlplane/) into ~/.cache/cloudburst/control-plane once per machine and release;
# with Go's caches warm a rebuild is a link of seconds. Needs Go 1.26 (README).
controlplane: setup
	$(BIN)/python -m sim.controlplane build

# Helm, built from its Go module (simulator/helm/) into ~/.cache/cloudburst/helm once per
# machine, for the chart's tests (tests/deploy/test_chart.py, tests/e2e/test_chart_install.py).
helm: setup
	$(BIN)/python -m sim.helm

# The first-boot script's test needs shellcheck (the Debian package; CI runs as root).
test: lint typecheck controlplane helm
	@command -v shellcheck >/dev/null || (apt-get update -qq && apt-get install -y -qq shellcheck)
	@# promtool and Prometheus itself (Debian's package): the shipped alert rules are checked
	@# and unit-tested, and tests/e2e/test_monitoring.py has a real Prometheus scrape the stack.
	@command -v promtool >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus)
	promtool check rules deploy/chart/files/prometheus-rules.yaml
	promtool test rules tests/monitoring/prometheus-rules.test.yaml
	@# Bytecode, as the image has it: the workflow sandbox loads workflow modules afresh for
	@# every run, and compiles them each time where none was written (PYTHONDONTWRITEBYTECODE).
	$(BIN)/python -m compileall -q api activities approver cluster cli planner observability simulator/sim trigger worker workflows >/dev/null
	@# What needs no whole stack, on both cores (what talks to the API server on a control plane
	@# of each worker's own). Then the end-to-end tests on Kubernetes' own control plane, two
	@# workers each with a cluster and a Temporal server of its own, handing their histories
	@# and Secret values over; then the replay of all of them and of the committed corpus.
	$(BIN)/pytest -n 2 tests/unit tests/workflows tests/deploy tests/sim tests/activities tests/providers tests/trigger
	rm -rf $(E2E_HISTORIES)
	CLOUDBURST_E2E_HISTORIES=$(E2E_HISTORIES) $(BIN)/pytest -n 2 tests/e2e
	CLOUDBURST_E2E_HISTORIES=$(E2E_HISTORIES) $(BIN)/pytest tests/replay

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

# Two entry points (see README): `make dev` runs the embedded stack, `make test` runs every check.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup dev demo test lint typecheck unit clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

dev: setup
	$(BIN)/cloudburst dev

demo: setup
	$(BIN)/cloudburst demo --scenario lifecycle

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy
	$(BIN)/mypy bench  # scripts, not a package: checked on their own

unit: setup
	$(BIN)/pytest tests/unit

# The first-boot script's test needs shellcheck (the Debian package; CI runs as root).
test: lint typecheck
	@command -v shellcheck >/dev/null || (apt-get update -qq && apt-get install -y -qq shellcheck)
	@# Bytecode, as the image has it: the workflow sandbox loads workflow modules afresh for
	@# every run, and compiles them each time where none was written (PYTHONDONTWRITEBYTECODE).
	$(BIN)/python -m compileall -q api activities cluster cli reporting sim trigger worker workflows >/dev/null
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

# tetrachip: two commands from a fresh clone.
#   make demo   the main end-to-end job on the embedded default config
#   make test   the whole test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test venv clean docs

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "tetrachip needs Python >= 3.11 (found %s)" % sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m runtime.demo

test: $(STAMP)
	$(PY) -m pytest -q

docs: $(STAMP)
	$(PY) -m isa.docgen

# ruff and mypy as configured in pyproject.toml, then the layer rules of docs/architecture.md (import-linter contracts)
.PHONY: lint deps
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo

# the package and module import graph and its circles (fails on any circle)
deps: $(STAMP)
	$(PY) -m tools.deps

clean:
	rm -rf $(VENV) build out .pytest_cache .hypothesis

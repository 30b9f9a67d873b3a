# tetrachip: two commands from a fresh clone.
#   make demo   the main end-to-end job on the embedded default config
#   make test   the test suite (what CI runs); lanes: make test-fast | test-rtl | test-cosim | test-long | fuzz-long
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# the optional extras installed into the venv (pyproject.toml): `make test EXTRAS=dev,torch` adds tc.from_torch's torch
EXTRAS ?= dev

.PHONY: demo test test-fast test-rtl test-cosim venv clean docs notebooks

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "tetrachip needs Python >= 3.11 (found %s)" % sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m runtime.demo

# pytest-xdist spreads the tests over the cores; the Verilog runs of the case library stay together
# (one simulator process on one worker: --dist loadgroup); `make test XDIST=` runs in one process.
XDIST ?= -n auto --dist loadgroup

test: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m "not long" --durations=20

# the tests marked long (Yosys synthesis of tiny's whole FPGA top, the LVT-memory rings at the preset's and the FPGA
# builds' depths, the variants of a test whose other cases make test runs, the second half of the compiler
# fuzz's graphs): not in make test
.PHONY: test-long
test-long: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m long --durations=20

# no RTL simulation: every test not marked rtl or cosim (tests/conftest.py marks them by folder)
test-fast: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m "not rtl and not cosim"

# the Amaranth units and the whole chip under Amaranth's simulator (tests/rtl)
test-rtl: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m rtl

# the chip's Verilog under cocotb against the simulator (tests/cosim)
test-cosim: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m cosim

# the long fuzzing lane: every fuzzer of the suite (tests named *fuzz*) with ten times its count
# (20,000 assembly texts, binaries, CLI argument vectors and API argument tuples each); not part of make test
.PHONY: fuzz-long
fuzz-long: $(STAMP)
	TETRACHIP_FUZZ_SCALE=10 $(PY) -m pytest -q $(XDIST) -k fuzz -m "not rtl and not cosim"

docs: $(STAMP)
	$(PY) -m isa.docgen

# the performance-study notebooks in full (QUICK = False): executed HTML and PNG figures under out/notebooks/
notebooks: $(STAMP)
	$(PY) notebooks/run.py --out out/notebooks

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

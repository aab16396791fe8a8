# Two commands: `make run` and `make test`. Each bootstraps .venv on its own from a bare Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.drlhet-installed

.PHONY: run test gpu-test bench lint install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall when the package metadata or the native sources change.
$(STAMP): $(BIN)/python pyproject.toml CMakeLists.txt $(shell find kernels hls -type f 2>/dev/null)
	$(BIN)/pip install --quiet "scikit-build-core>=0.10" "cmake>=3.24" ninja "jax>=0.10" "hls4ml>=1.3"
	$(BIN)/pip install --quiet --no-build-isolation -e ".[test,bench]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python -m drlhet train --stop-at-return 475 --out runs

test: $(STAMP)
	$(BIN)/python -m pytest -q

# On a machine with an NVIDIA GPU: JAX's CUDA plugin and CuPy, then the tests that need them
# (the CUDA kernels against the reference, conformance on the GPU; they skip without a GPU).
gpu-test: $(STAMP)
	$(BIN)/pip install --quiet "jax[cuda13]" "cupy-cuda13x>=14.0"
	$(BIN)/python -m pytest -q tests/backends/test_cuda.py tests/backends/conformance.py -k cuda

# Benchmarks write under results/raw/ (not committed), never over the committed, pinned results.
bench: $(STAMP)
	mkdir -p results/raw
	$(BIN)/python experiments/bench_replay.py --out results/raw/bench_replay.json

lint: $(STAMP)
	$(BIN)/ruff format --check drlhet tests experiments
	$(BIN)/ruff check drlhet tests experiments
	$(BIN)/mypy --check-untyped-defs drlhet

clean:
	rm -rf build $(VENV)

# Two commands: `make run` and `make test`. Each bootstraps .venv on its own from a bare Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.drlhet-installed

.PHONY: run test test-times test-slow fuzz gpu-test gpu-dry-run gpu-wheels bench lint install clean sanitize peers figures

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall when the package metadata or the native sources change.
$(STAMP): $(BIN)/python pyproject.toml CMakeLists.txt $(shell find kernels hls -type f 2>/dev/null)
	$(BIN)/pip install --quiet "scikit-build-core>=0.10" "cmake>=3.24" ninja "jax>=0.10" "hls4ml>=1.3"
	$(BIN)/pip install --quiet --no-build-isolation -e ".[test,bench,gymnasium,ray]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python -m drlhet train --stop-at-return 475 --out runs

# Two pytest-xdist workers, whole files to each (a module's fixtures are built once): in one
# process the compile-bound suite keeps about 1.5 of this machine's 2 cores busy, in two 1.9
# (tests/runtime: 694 s in one process, 497 s in two, measured 2026-11-25). Files go out in
# collection order, the longest first (tests/conftest.py, SLOW_FIRST), not by test count.
# `make test PYTEST_WORKERS=0` runs it in one process.
PYTEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  --durations=20

# `make test` with tests/compile_times.py: each test's wall time beside JAX's tracing, lowering,
# XLA compiling and cache loading, in test-times.json (DRLHET_TEST_TIMES names another file),
# and the totals with the ten longest files at the end.
test-times: $(STAMP)
	PYTHONPATH=tests $(BIN)/python -m pytest -p compile_times -q -n $(PYTEST_WORKERS) \
	  --dist loadfile --no-loadscope-reorder

# The tests marked `slow`, which `make test` leaves out (long fuzzing, random shapes through
# every CUDA path under the emulation, runs of tagged updates, the longest host loops, the GPU
# tests stage's triage on the emulated GPU): 9:06 in two workers on the 2-core VM (2026-11-28,
# 27 passed, 3 skipped; 26:12 on the slower host, 2026-11-29 at d640af9, 33 passed, 3 skipped).
# Run it when a change touches
# what they cover; a slow test nobody runs rots (one had, after its helper's arguments grew).
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m slow --durations=10

# The property tests (hypothesis), slow ones too, drawing new examples each run: `make test` draws
# the same ones every time (tests/conftest.py), so that a defect nobody has found yet cannot turn
# one CI run red and the next green. A failure prints the seed that replays it. Run it after
# touching a tree kernel or the buffer's checks, and more than once.
PROPERTY_TESTS := tests/backends/test_fuzz.py tests/backends/test_kernel_header.py \
  tests/backends/test_kernel_header_compiles.py tests/backends/test_fpga.py \
  tests/replay/test_prioritized.py tests/replay/test_fixed_point.py tests/replay/test_uint64.py
fuzz: $(STAMP)
	DRLHET_HYPOTHESIS=explore $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile \
	  -m "slow or not slow" -k "not planted" $(PROPERTY_TESTS)

# On a machine with an NVIDIA GPU: JAX's CUDA plugin and CuPy, then the tests that need them
# (the CUDA kernels against the reference, conformance on the GPU; they skip without a GPU).
# Offline, with jax[cuda] already installed: experiments/gpu_checks.sh (build, these tests,
# training, benchmarks and GPU profiles, each stage logged; on an H200, 2026-11-29, all 260 GPU
# tests passed, the cluster, tagged-claims and spread paths' stages among them).
# A test that hangs (only the cluster, tagged and spread paths' kernels wait on other blocks) stops
# after 5 minutes with every thread's stack (pytest-timeout), not left to hang the run.
gpu-test: $(STAMP)
	$(BIN)/pip install --quiet "jax[cuda13]" "cupy-cuda13x>=14.0"
	$(BIN)/python -m pytest -q --timeout 300 --timeout-method thread tests/backends/test_cuda.py \
	  tests/backends/test_cuda_buffer.py tests/backends/test_cuda_buffer_lowering.py \
	  tests/backends/test_cuda_buffer_device.py tests/backends/conformance.py \
	  -k "(cuda or gpu) and not emulated"

# Before a GPU call, on any machine: the same GPU tests with their GPU place pointed at the
# emulated CPU device (tests/backends/emulated_gpu.py), so that the tests' own code has run
# before device time is spent on it; then again with the parts that gpu_checks.sh's triage can
# turn off (the key's draw in the call, the descents' top copy) off, as its reruns run them.
# The kernels' behaviour on a GPU it cannot show.
GPU_DRY_RUN = PYTHONPATH=tests/backends $(BIN)/python -m pytest -p emulated_gpu -q \
  -n $(PYTEST_WORKERS) --dist load tests/backends/test_cuda.py tests/backends/test_cuda_buffer.py \
  tests/backends/test_cuda_buffer_lowering.py tests/backends/test_cuda_buffer_device.py \
  tests/backends/conformance.py -k "(cuda or gpu) and not emulated" -rs
gpu-dry-run: $(STAMP)
	$(GPU_DRY_RUN) -m "not slow"
	DRLHET_TEST_CUDA_KEY_TARGETS=0 DRLHET_TEST_CUDA_SHARED_TOP=0 \
	  $(GPU_DRY_RUN) -m "not slow and not cuda_key_targets and not cuda_shared_top"

# Before a GPU call, here: the packages that the lent GPU machine's image lacks (it reaches no
# index), as wheels in .whl/ (ignored by git) at this .venv's versions, for its CPython 3.12;
# the call carries .whl and runs WHEELS=.whl experiments/gpu_checks.sh, which installs them
# there. All pure Python (about 1.4 MB); what they need, the image has (chex, flax, numpy,
# matplotlib, seaborn, cloudpickle, tensorstore, typing-extensions, pytest).
GPU_WHEELS = gymnax tyro gymnasium farama-notifications docstring-parser typeguard flashbax \
  pytest-timeout
gpu-wheels: $(STAMP)
	rm -rf .whl && mkdir .whl
	for p in $(GPU_WHEELS); do \
	  v=$$($(BIN)/pip show $$p | sed -n 's/^Version: //p'); \
	  [ -n "$$v" ] || { echo "gpu-wheels: $$p is not installed in $(VENV)"; exit 1; }; \
	  $(BIN)/pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
	    --implementation cp --platform manylinux2014_x86_64 -d .whl "$$p==$$v" || exit 1; \
	done
	ls .whl

# Benchmarks write under results/raw/ (not committed), never over the committed, pinned results.
bench: $(STAMP)
	mkdir -p results/raw
	$(BIN)/python experiments/bench_replay.py --out results/raw/bench_replay.json

lint: $(STAMP)
	$(BIN)/ruff format --check drlhet tests experiments
	$(BIN)/ruff check drlhet tests experiments
	$(BIN)/mypy --check-untyped-defs drlhet experiments

# The C++ kernels (kernels/cpu, kernels/fpga_sim, and the CUDA kernels under their host emulation,
# kernels/cuda/emu, whose fibers ASan is told about) built with ASan + UBSan into build/sanitize
# (the installed libraries are not touched), then their tests with those libraries loaded
# (tests/conftest.py reads DRLHET_TEST_KERNEL_DIR). Python is not instrumented, so the sanitizer
# runtimes are preloaded and leak detection is off (Python itself never frees everything); the
# tests' output goes through uncaptured (--capture=sys) so a report that kills the process is
# seen. Fails on a failing test or on any sanitizer report (the log: build/sanitize/tests.log).
# One report is suppressed: shift-base in hls4ml's ap_private.h (clearUnusedBits sign-extends by
# shifting a signed word, which its authors exempt from the sanitizer under clang).
SANITIZE_DIR := build/sanitize
SANITIZE_CXX ?= g++
SANITIZE_TESTS := tests/backends/test_native.py tests/backends/conformance.py \
	tests/backends/test_cuda_emu.py tests/backends/test_cuda_emu_sample.py \
	tests/backends/test_cuda_emu_launch.py tests/backends/test_fpga.py tests/backends/test_channel.py \
	tests/backends/test_kernel_header.py tests/backends/test_kernel_header_compiles.py \
	tests/backends/test_fpga_learner.py \
	tests/backends/test_fpga_learner_ddpg.py tests/backends/test_fuzz.py \
	tests/backends/test_cuda_tagged.py
SANITIZE_RT = $(shell $(SANITIZE_CXX) -print-file-name=libasan.so) \
	$(shell $(SANITIZE_CXX) -print-file-name=libubsan.so)
SANITIZE_SUPP = $(abspath $(SANITIZE_DIR))/ubsan.supp
SANITIZE_UBSAN = print_stacktrace=1:halt_on_error=1:suppressions=$(SANITIZE_SUPP)
SANITIZE_REPORT := runtime error:|ERROR: AddressSanitizer|Sanitizer:DEADLYSIGNAL|SANITIZE FAILED

sanitize: $(STAMP)
	$(BIN)/cmake -S . -B $(SANITIZE_DIR) -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(BIN)/ninja) \
	  -DCMAKE_CXX_COMPILER=$(SANITIZE_CXX) -DDRLHET_SANITIZE=ON -DDRLHET_CUDA=OFF \
	  -DPython_EXECUTABLE=$(abspath $(BIN)/python) \
	  -DCMAKE_LIBRARY_OUTPUT_DIRECTORY=$(abspath $(SANITIZE_DIR)/lib)
	$(BIN)/cmake --build $(SANITIZE_DIR)
	printf 'shift-base:ap_private.h\n' > $(SANITIZE_SUPP)
	( LD_PRELOAD="$(SANITIZE_RT)" DRLHET_TEST_KERNEL_DIR=$(abspath $(SANITIZE_DIR)/lib) \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=$(SANITIZE_UBSAN) \
	  $(BIN)/python -m pytest -q -p no:cacheprovider --capture=sys $(SANITIZE_TESTS) 2>&1 \
	  || echo "SANITIZE FAILED: pytest exited with status $$?" ) | tee $(SANITIZE_DIR)/tests.log
	@! grep -E "$(SANITIZE_REPORT)" $(SANITIZE_DIR)/tests.log

# The peers of the end-to-end comparison (experiments/fig_peers.py), each in a virtual environment
# of its own, never in the project's: Stable-Baselines3 and RLlib on the PyTorch 2.13.0 CPU build
# (installed first, so that nothing pulls a CUDA build), with one torch thread when they run.
# RLlib and SB3 live apart because ray pins its own gymnasium. flashbax (the JAX peer) is in the
# project's `bench` extra: its loop is drlhet's own with flashbax's buffer.
PEERS := .venv-peers
TORCH_CPU := torch==2.13.0

$(PEERS)/sb3/.installed:
	$(PYTHON) -m venv $(PEERS)/sb3
	$(PEERS)/sb3/bin/pip install --quiet --upgrade pip
	$(PEERS)/sb3/bin/pip install --quiet $(TORCH_CPU)
	$(PEERS)/sb3/bin/pip install --quiet "stable-baselines3>=2.7" "gymnasium>=1.0"
	touch $@

$(PEERS)/rllib/.installed:
	$(PYTHON) -m venv $(PEERS)/rllib
	$(PEERS)/rllib/bin/pip install --quiet --upgrade pip
	$(PEERS)/rllib/bin/pip install --quiet $(TORCH_CPU)
	$(PEERS)/rllib/bin/pip install --quiet "ray[rllib]>=2.40"
	touch $@

peers: $(STAMP) $(PEERS)/sb3/.installed $(PEERS)/rllib/.installed

# Every figure of the README at a reduced scale, written under $(FIG_OUT) (git-ignored;
# FIG_OUT=results rebuilds the committed files in place). Each script's --full (or the command
# beside its figure in the README) gives the README's scale. From a fresh clone on 2026-11-25,
# with the 2-core VM at about 45% of its usual speed: 26.3 minutes, 8.7 of them the time-to-475
# peers run (RLlib's tuned recipe); see the README. The matched and TD3 peers runs time
# throughput only, so they hold just the evaluations that needs.
FIG_OUT ?= results/reduced

figures: $(STAMP) peers
	mkdir -p $(FIG_OUT)
	$(BIN)/python experiments/fig_primitives.py --out $(FIG_OUT)/fig_primitives.json --plot $(FIG_OUT)/fig_primitives.png
	$(BIN)/python experiments/fig_branching.py --out $(FIG_OUT)/fig_branching.json --plot $(FIG_OUT)/fig_branching.png
	$(BIN)/python experiments/fig_mapping.py --out $(FIG_OUT)/fig_mapping.json --plot $(FIG_OUT)/fig_mapping.png
	$(BIN)/python experiments/fig_learning.py --tasks dqn --seeds 3 --out $(FIG_OUT)
	$(BIN)/python experiments/fig_delay.py --tasks dqn --delays 0 16 --seeds 3 --out $(FIG_OUT)
	$(BIN)/python experiments/fig_delay.py --tasks td3-hopper --delays 0 16 --seeds 1 --steps 20000 \
	  --plot delay_hopper.png --out $(FIG_OUT)
	$(BIN)/python experiments/fig_mapping_parity.py --seeds 2 --out $(FIG_OUT)
	$(BIN)/python experiments/fig_peers.py --target 475 --steps 60000 \
	  --systems drlhet drlhet-cached flashbax sb3 sb3-tuned rllib-tuned \
	  --out $(FIG_OUT)/fig_peers.json --plot $(FIG_OUT)/fig_peers.png
	$(BIN)/python experiments/fig_peers.py --systems drlhet rllib sb3 flashbax \
	  --steps 5000 --eval-every 2000 \
	  --out $(FIG_OUT)/fig_peers_matched.json --plot $(FIG_OUT)/fig_peers_matched.png
	$(BIN)/python experiments/fig_peers.py --algo td3 --systems drlhet sb3 rllib \
	  --steps 3000 --eval-every 1000 \
	  --out $(FIG_OUT)/fig_peers_td3.json --plot $(FIG_OUT)/fig_peers_td3.png

clean:
	rm -rf build $(VENV) $(PEERS)

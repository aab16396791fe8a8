"""Test-session setup: two CPU devices, so that multi-device mappings run for real; a cache
folder of the session's own (``$DRLHET_CACHE``, removed at exit) holding JAX's persistent
compilation cache, so that the many tests that build the same programs compile each once (the
suite is compile-bound) and nothing is written to the user's cache folder. Under
``pytest -n N`` (pytest-xdist; `make test` runs two workers) the workers share the folder of the
session that started them.

``DRLHET_TEST_KERNEL_DIR`` (set by `make sanitize`) names a folder of kernel libraries built
apart, e.g. with ASan and UBSan; it is searched before the installed package, so the backends
load those libraries instead of the installed ones.

Property tests (hypothesis) draw the same examples on every run (profile ``ci``, derandomized,
no example database): a defect they have not found yet cannot turn one run red and the next
green. ``DRLHET_HYPOTHESIS=explore`` (`make fuzz`) draws new examples each run and prints the
seed of a failure to replay it (``--hypothesis-seed``).

`SLOW_FIRST` puts the longest files first; `make test` hands whole files to its workers in
collection order (``--dist loadfile --no-loadscope-reorder``), so neither worker is left with a
long file at the end while the other has nothing to do.
"""

import contextlib
import os
import runpy
import sys
import tempfile
from pathlib import Path

import jax
import pytest
from hypothesis import settings

import drlhet
from drlhet.cli.common import enable_compilation_cache

jax.config.update("jax_num_cpu_devices", 2)

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True)
HYPOTHESIS_PROFILES = ("ci", "explore")
_PROFILE = os.environ.get("DRLHET_HYPOTHESIS", "ci")
if _PROFILE not in HYPOTHESIS_PROFILES:
    raise ValueError(f"DRLHET_HYPOTHESIS={_PROFILE!r}: one of {', '.join(HYPOTHESIS_PROFILES)}")
settings.load_profile(_PROFILE)

if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("DRLHET_TEST_SESSION_CACHE"):
    # a worker of `pytest -n N`: the folder of the session that started it, shared by all
    # workers (JAX writes each cache entry whole, so workers can share it)
    os.environ["DRLHET_CACHE"] = os.environ["DRLHET_TEST_SESSION_CACHE"]
else:
    _SESSION_CACHE = tempfile.TemporaryDirectory(prefix="drlhet-tests-")
    os.environ["DRLHET_CACHE"] = os.environ["DRLHET_TEST_SESSION_CACHE"] = _SESSION_CACHE.name
enable_compilation_cache()  # the folder `drlhet train` would enable: the same, so no switch

_KERNEL_DIR = os.environ.get("DRLHET_TEST_KERNEL_DIR")
if _KERNEL_DIR:
    if not any(Path(_KERNEL_DIR).glob("libdrlhet_*")):
        raise ValueError(f"DRLHET_TEST_KERNEL_DIR={_KERNEL_DIR!r} holds no libdrlhet_* library")
    # the backends look for their libraries along the package's search path (library_path)
    drlhet.__path__.insert(0, str(Path(_KERNEL_DIR).resolve()))
    # the sanitizer runtimes preloaded into this process must not reach the compilers the tests
    # start (nvcc crashes under a preloaded ASan)
    os.environ.pop("LD_PRELOAD", None)

SLOW_FIRST = (
    "tests/runtime/test_failures.py",
    "tests/test_checkpoint.py",
    "tests/runtime/test_pipeline.py",
    "tests/runtime/test_run.py",
    "tests/backends/test_cuda_buffer_device.py",
    "tests/backends/test_fuzz.py",
    "tests/backends/test_fpga_learner_ddpg.py",
    "tests/backends/test_fpga_replay_board.py",
    "tests/agents/test_agents.py",
    "tests/dse/test_profile_cli.py",
    "tests/test_checkpoint_cli.py",
    "tests/backends/test_fpga_learner.py",
    "tests/backends/test_fpga.py",
    "tests/test_ray_actors.py",
    "tests/test_examples.py",
    "tests/test_ray_run_end.py",
    "tests/backends/test_fpga_learner_board_run.py",
    "tests/replay/test_fixed_point.py",
)
"""The files with the longest tests, longest first (worker seconds in `make test-times` from a
clean clone, 2-core VM, 2026-11-30 at 15677a8: 103, 99, 94, 60, 53, 52, 50, 45, 44, 43, 38,
37 s; test_ray_actors.py's 77 s since split into three files, the examples' 42 s into 26 and a
slow case; the rest 16-31 s; test_fpga_replay_board.py, added 2026-12-02: 58 s in one process)."""


def pytest_collection_modifyitems(config, items):
    """`SLOW_FIRST` first, every other file after them in collection order (a stable sort: a
    file's tests stay together and in order)."""
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture
def refused(capsys):
    """``with refused("text"):`` expects the block to end the script as the experiments refuse
    bad input: exit status 2 and one line on stderr, ``<script>: error: ...text...``."""

    @contextlib.contextmanager
    def check(text: str):
        with pytest.raises(SystemExit) as stop:
            yield
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ": error: " in err and text in err, err

    return check


EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


@pytest.fixture
def cli(monkeypatch, tmp_path):
    """``cli("fig_delay", *args)`` runs experiments/fig_delay.py as ``python fig_delay.py
    args`` would, in ``tmp_path``, but in this process: jax and drlhet are imported already, so
    a refusal, which comes before anything is trained or measured, takes a fraction of a
    second (a subprocess would spend seconds importing jax)."""
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    monkeypatch.setattr(sys, "path", list(sys.path))  # fig_peers adds its peers folder
    monkeypatch.chdir(tmp_path)

    def call(script: str, *args: object) -> None:
        path = EXPERIMENTS / f"{script}.py"
        monkeypatch.setattr(sys, "argv", [str(path), *map(str, args)])
        runpy.run_path(str(path), run_name="__main__")

    return call

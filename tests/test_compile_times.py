"""The test-time plugin (tests/compile_times.py, ``make test-times``): a test that compiles gets
its tracing, lowering and compiling counted, one that does not gets none, with and without
pytest-xdist workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

INNER = """
import jax
import jax.numpy as jnp


def test_compiles():
    f = jax.jit(lambda x: jnp.sin(x) * 2)
    f(jnp.ones(3)).block_until_ready()
    f(jnp.ones(5)).block_until_ready()  # a second shape: traced and compiled again


def test_plain():
    assert sum(range(4)) == 6
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_each_test_gets_its_own_compile_figures(tmp_path: Path, workers: list[str]):
    (tmp_path / "test_inner.py").write_text(INNER)
    out = tmp_path / "times.json"
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parent),
        "DRLHET_TEST_TIMES": str(out),
        # no persistent cache (a user's JAX_COMPILATION_CACHE_DIR could hold the inner programs)
        "JAX_COMPILATION_CACHE_DIR": "",
    }
    cmd = [sys.executable, "-m", "pytest", "-p", "compile_times", "-q", "-p", "no:cacheprovider"]
    (tmp_path / "times.gw7.json").write_text('{"stale::test": {"wall": 1.0}}')  # a killed run's
    got = subprocess.run(
        [*cmd, *workers, "test_inner.py"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert got.returncode == 0, got.stdout + got.stderr
    rows = json.loads(out.read_text())
    compiled, plain = rows["test_inner.py::test_compiles"], rows["test_inner.py::test_plain"]
    assert compiled["trace_n"] >= 2 and compiled["compile_n"] >= 2 and compiled["lower_n"] >= 2
    assert 0 < compiled["compile"] < compiled["wall"]
    assert plain.keys() == {"wall"} and plain["wall"] > 0 and "stale::test" not in rows
    assert "test times (worker seconds): wall" in got.stdout
    assert list(tmp_path.glob("times.gw*.json")) == []  # the workers' parts merged and removed

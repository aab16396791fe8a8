"""The programs in examples/: each runs with ``--quick`` in a process of its own (as a reader
would run it), ends with exit status 0, and prints the lines that say it showed what it shows.
The processes share the session's compilation cache (conftest.py), so a rerun loads its
programs instead of compiling them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, *args: str) -> str:
    """The stdout of ``python examples/<name>.py --quick args`` (exit status 0 asserted)."""
    env = dict(os.environ)
    if os.environ.get("DRLHET_CACHE"):  # set by conftest.py: the session's own folder
        env["JAX_COMPILATION_CACHE_DIR"] = str(Path(os.environ["DRLHET_CACHE"]) / "compiled")
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), "--quick", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=EXAMPLES.parent,
    )
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_every_example_has_a_docstring_that_says_how_to_run_it():
    names = sorted(p.stem for p in EXAMPLES.glob("*.py"))
    assert names, "no example found"
    for name in names:
        text = (EXAMPLES / f"{name}.py").read_text()
        assert text.startswith('"""'), name
        assert f"python examples/{name}.py" in text, name
        assert "--quick" in text, name


def test_replay_buffer():
    out = run_example("replay_buffer")
    assert "filled: size 4096" in out
    assert "max of each batch within one float32 ulp of 1: True" in out
    assert "hot slot drawn more often than any other: True" in out
    assert "max within one ulp of 1 in every batch: True" in out
    found = re.search(r"slot 7 drawn (\d+) times \(expected ([\d.]+)", out)
    assert found, out
    drawn, expected = int(found.group(1)), float(found.group(2))
    assert abs(drawn - expected) < 0.2 * expected, out  # stratified draws stay close


def test_train_and_evaluate():
    out = run_example("train_and_evaluate")
    assert re.search(r"^chunk 0: .* env steps/s", out, re.M), out
    assert re.search(r"^chunk 1: ", out, re.M), out
    assert "greedy evaluation, 20 episodes a seed (measured):" in out
    for seed in (0, 1):
        assert re.search(rf"^  seed {seed}: +[\d.]+ \+- +[\d.]+", out, re.M), out
    assert "all seeds:" in out


def test_checkpoint_and_resume():
    out = run_example("checkpoint_and_resume")
    assert "run ended by Stopped: stopped after chunk 0 (saved)" in out, out
    assert "restored chunk 0 from " in out
    assert "resumed run: chunks [1, 2]," in out
    assert "eval returns of every chunk match the uninterrupted run: True" in out, out
    assert "final agent parameters and optimizer state bit-identical: True" in out, out


@pytest.mark.parametrize(
    "delay",
    # both slow (make test-slow): k = 0's claim, the split's agents bit-identical to the fused
    # loop's, is tests/runtime/test_run.py's k = 0 case (16 s here); k = 4's pipeline 30 s more
    [pytest.param(0, marks=pytest.mark.slow), pytest.param(4, marks=pytest.mark.slow)],
)
def test_split_mapping(delay):
    out = run_example("split_mapping", "--delay", str(delay))
    assert "devices: [CpuDevice(id=0), CpuDevice(id=1)]" in out, out
    assert re.search(r"^fused .* env steps/s \(measured", out, re.M), out
    assert re.search(r"^split actors=cpu:0,replay=\w+@cpu:1,learner=cpu:1: ", out, re.M), out
    if delay == 0:
        assert "same eval returns at delay 0: True" in out, out
        assert "bit-identical agents at delay 0: True" in out, out
    else:
        assert "the split runs as a pipeline" in out, out

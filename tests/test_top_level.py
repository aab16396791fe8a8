"""``import drlhet``: the names most programs need, each from its module on first use; the
import alone starts nothing (JAX not imported: ``drlhet train`` sets its CPU devices first)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest

import drlhet


def test_importing_drlhet_imports_no_jax():
    code = "import sys, drlhet; print('jax' in sys.modules, drlhet.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "False" and out.stdout.split()[1][0].isdigit()


@pytest.mark.parametrize("name", sorted(drlhet.EXPORTS))
def test_each_name_is_its_modules_own(name):
    assert getattr(drlhet, name) is getattr(importlib.import_module(drlhet.EXPORTS[name]), name)
    assert name in dir(drlhet) and name in drlhet.__all__


def test_a_misspelt_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="module 'drlhet' has no attribute 'TrainConfg'"):
        drlhet.TrainConfg  # noqa: B018


def test_the_docstrings_example_runs():
    replay = drlhet.make_prioritized_replay(2**10, 4, tree_ops=drlhet.tree_ops("native"))
    state = replay.add(replay.init({"x": 0.0}), {"x": np.array([1.0, 2.0])})
    assert int(state.size) == 2


def test_the_compilation_cache_keeps_even_a_small_program(tmp_path):
    code = (
        "import sys, drlhet, jax; drlhet.enable_compilation_cache(sys.argv[1]); "
        "jax.jit(lambda x: x + 1)(1.0).block_until_ready()"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "c")], check=True)
    assert list((tmp_path / "c").iterdir())  # JAX's defaults keep no program this quick


def test_a_compilation_cache_folder_that_cannot_be_made_is_named(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match=f"no compilation cache folder can be made at {tmp_path}"):
        drlhet.enable_compilation_cache(tmp_path / "f" / "c")

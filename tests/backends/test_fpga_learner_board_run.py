"""Training with the FPGA learner module on a board (``TrainConfig.learner_board``): a run whose
steps go through the synthesized top's host protocol (``sim``: the top built here) equals the
run on the C-simulation's FFI step bit for bit, fused or split; a board asked for without a
learner backend that has one, or one that cannot be opened, is refused before the run, in one
line from the CLI."""

from __future__ import annotations

import dataclasses
import shutil

import jax
import numpy as np
import pytest

from drlhet.backends import BackendUnavailable, learner_step
from drlhet.cli import main
from drlhet.runtime.config import ConfigError
from drlhet.runtime.run import _check_resumed, run
from tests.cli_args import refused_before_the_run
from tests.runtime.test_run import SMALL as RUN_SMALL
from tests.test_cli import TINY

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to build the top")

SMALL = dataclasses.replace(RUN_SMALL, learner="fpga")
"""tests/runtime/test_run.py's small run, its steps on the FPGA learner module."""


def host(tree):
    """Host arrays of ``tree``, typed keys as their data."""

    def one(x):
        is_key = jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
        return np.asarray(jax.random.key_data(x) if is_key else x)

    return jax.tree.map(one, tree)


@needs_gxx
@pytest.mark.parametrize("mapping", [None, "actors=cpu:0,replay=jax@cpu:1,learner=fpga@cpu:1"])
def test_a_run_on_the_simulated_board_equals_the_ffi_run(mapping):
    ffi_states, ffi_rows = run(SMALL, mapping)
    states, rows = run(dataclasses.replace(SMALL, learner_board="sim"), mapping)
    same = jax.tree.map(np.array_equal, host(states.agent), host(ffi_states.agent))
    assert all(jax.tree.leaves(same))
    for key in ("eval_return", "loss", "abs_td"):
        assert [r[key] for r in rows] == [r[key] for r in ffi_rows], key


def test_a_board_needs_a_learner_backend_that_has_one():
    for learner in (None, "jax"):  # (run names the mapping's: jax)
        said = r"learner_board 'sim' puts the training step on a board, and learner 'jax' has none"
        with pytest.raises(ConfigError, match=said + r" \(fpga has one\)") as e:
            run(dataclasses.replace(SMALL, learner=learner, learner_board="sim"))
        assert e.value.fields == ("learner_board", "learner")
    with pytest.raises(BackendUnavailable, match=r"learner 'jax' runs on no board \(fpga do\)"):
        learner_step("jax", board="sim")
    with pytest.raises(ConfigError, match="learner_board is empty"):
        run(dataclasses.replace(SMALL, learner_board=" "))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--learner-board", "sim"], "--learner-board 'sim' puts the training step on a board, and "
                                     "--learner 'jax' has none (fpga has one)"),
        (["--learner", "fpga", "--learner-board", "{tmp}/none.xclbin"],
         "no pyxrt: the FPGA board driver needs it"),
    ],
)  # fmt: skip
def test_the_cli_refuses_a_board_it_cannot_use_in_one_line(tmp_path, capsys, args, message):
    refused_before_the_run(main, tmp_path, capsys, args, message)


@needs_gxx
def test_the_cli_trains_on_the_simulated_board(tmp_path, capsys):
    main(["train", *TINY, "--learner", "fpga", "--learner-board", "sim", "--out", str(tmp_path)])
    assert "final evaluation return per seed" in capsys.readouterr().out


def test_a_resume_may_move_the_learner_onto_a_board():
    _check_resumed(dataclasses.replace(SMALL, learner_board="sim"), dataclasses.asdict(SMALL))

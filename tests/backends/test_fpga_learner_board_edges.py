"""The FPGA learner board driver, reviewed: a step count past 2^31 - 1 (int32, wrapping in JAX)
is loaded as the board's uint32 word (it raised OverflowError), a step the bitstream did not
run is refused (stale priorities came back as the step's), and steps of two programs through
one board never interleave their load, step and store (one seed got another's memories)."""

from __future__ import annotations

import shutil
import threading
import time

import jax
import jax.numpy as jnp
import pytest

from drlhet.backends.fpga_learner_board import STEP, board_call
from drlhet.backends.fpga_learner_links import SimulatedLearnerBoard
from tests.backends.test_fpga_learner_board import BUILDS, agents, batch_of, same

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to build the top")


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    return SimulatedLearnerBoard(BUILDS["dqn"], tmp_path_factory.mktemp("top"))


def test_a_step_count_past_int32_max_wraps_as_in_jax(board):
    agent, ffi, on_board = agents("dqn", board_call(board))
    key = jax.random.key(5)
    state = agent.init(key)._replace(steps=jnp.int32(2**31 - 1))  # steps + 1 wraps negative
    data, w = batch_of("dqn", key)
    got = jax.jit(on_board.update)(state, data, w, key)
    assert same(got, jax.jit(ffi.update)(state, data, w, key))
    assert int(got[0].steps) == -(2**31)


class Skipping:
    """A bitstream that ignores step commands (as the top does a batch it refuses)."""

    def __init__(self, board):
        self.board = board

    def run(self, cmd, hyper, inputs, out_words):
        if int(cmd[0]) == STEP:
            return cmd.copy(), jnp.zeros(out_words, jnp.float32)
        return self.board.run(cmd, hyper, inputs, out_words)


def test_a_step_the_bitstream_did_not_run_is_refused(board):
    agent, _, on_board = agents("dqn", board_call(Skipping(board), check=False))
    data, w = batch_of("dqn", jax.random.key(0))
    with pytest.raises(Exception, match="learner board: the step did not run"):
        state = agent.init(jax.random.key(0))
        jax.block_until_ready(jax.jit(on_board.update)(state, data, w, 0))


class Slow:
    """The board, each command a little late (a bus transfer): threads meet mid-step."""

    def __init__(self, board):
        self.board = board

    def run(self, cmd, hyper, inputs, out_words):
        time.sleep(0.01)
        return self.board.run(cmd, hyper, inputs, out_words)


def test_steps_from_two_threads_never_interleave(board):
    slow, runs = Slow(board), []
    for seed in range(4):  # compiled first: the threads then call at once
        agent, ffi, on_board = agents("dqn", board_call(slow))
        key = jax.random.key(seed)
        args = (agent.init(key), *batch_of("dqn", key), key)
        runs.append((jax.jit(on_board.update).lower(*args).compile(), args))
        runs[-1] += (jax.jit(ffi.update)(*args),)
    jax.block_until_ready(runs[0][0](*runs[0][1]))  # (the build asked once)
    got: dict[int, bool] = {}
    start = threading.Barrier(len(runs))

    def train(seed: int) -> None:
        step, args, want = runs[seed]
        start.wait()
        got[seed] = same(jax.block_until_ready(step(*args)), want)

    threads = [threading.Thread(target=train, args=(s,)) for s in range(len(runs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {s: True for s in range(len(runs))}

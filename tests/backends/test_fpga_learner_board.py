"""The FPGA learner module on a board (`drlhet.backends.fpga_learner_board`): the agent's update
through the synthesized top's protocol (load, step, store) equals the C-simulation's FFI step
bit for bit, inside jit and vmapped over seeds, on the top's own C-simulation and through pynq's
and pyxrt's call shapes (stand-ins); a bitstream built for another network, another protocol or
none is refused before a step, naming what differs."""

from __future__ import annotations

import shutil
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from drlhet.agents.ddpg import DDPGConfig, make_ddpg
from drlhet.agents.dqn import DQNConfig, make_dqn
from drlhet.backends import fpga, fpga_learner
from drlhet.backends.base import BackendUnavailable
from drlhet.backends.fpga_learner_board import INFO, LearnerBuild, board_call
from drlhet.backends.fpga_learner_links import (
    PynqLearnerBoard,
    SimulatedLearnerBoard,
    XrtLearnerBoard,
    open_learner_board,
)
from tests.backends.board_standins import pynq_module, pyxrt_module

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to build the top")

B = 32
DQN = DQNConfig(hidden=(64, 64))  # drlhet's CartPole DQN, dueling
TD3 = DDPGConfig(hidden=(32, 32), td3=True, policy_delay=2)
BUILDS = {
    "dqn": LearnerBuild(0, 4, 2, (64, 64, 0), 1, 1),
    "td3": LearnerBuild(1, 3, 1, (32, 32, 0), 0, 2),
}


def agents(algo: str, call):
    """The FFI's agent and ``call``'s, built alike."""
    if algo == "dqn":
        agent = make_dqn(DQN, (4,), 2)
        wrap = lambda c: fpga_learner.wrap("dqn", DQN, agent, (4,), 2, B, call=c)  # noqa: E731
    else:
        agent = make_ddpg(TD3, (3,), 1, -2.0, 2.0)
        wrap = lambda c: fpga_learner.wrap(  # noqa: E731
            "ddpg", TD3, agent, (3,), 1, B, call=c, bounds=(-2.0, 2.0)
        )
    return agent, wrap(fpga._learner_call), wrap(call)


def batch_of(algo: str, key):
    obs = 4 if algo == "dqn" else 3
    ks = jax.random.split(key, 6)
    action = (
        jax.random.randint(ks[1], (B,), 0, 2)
        if algo == "dqn"
        else jax.random.uniform(ks[1], (B, 1), minval=-2, maxval=2)
    )
    data = {
        "obs": jax.random.normal(ks[0], (B, obs)),
        "action": action,
        "reward": jax.random.normal(ks[2], (B,)),
        "discount": jnp.full((B,), 0.99),
        "next_obs": jax.random.normal(ks[3], (B, obs)),
    }
    return data, jax.random.uniform(ks[4], (B,), minval=0.1, maxval=1.0)


@pytest.fixture(scope="module", params=sorted(BUILDS))
def simulated(request, tmp_path_factory):
    algo = request.param
    return algo, SimulatedLearnerBoard(BUILDS[algo], tmp_path_factory.mktemp("top"))


def same(a, b) -> bool:
    return all(jax.tree.leaves(jax.tree.map(lambda x, y: bool(jnp.array_equal(x, y)), a, b)))


def test_steps_on_the_board_equal_the_ffi_step_bit_for_bit(simulated):
    algo, board = simulated
    agent, ffi, on_board = agents(algo, board_call(board))
    key = jax.random.key(1)
    a = b = agent.init(key)
    for step in range(4):  # TD3: actor steps and critic-only steps
        data, w = batch_of(algo, jax.random.fold_in(key, step))
        a, pa, ma = jax.jit(ffi.update)(a, data, w, key)
        b, pb, mb = jax.jit(on_board.update)(b, data, w, key)
        assert same(a, b) and same(pa, pb) and same(ma, mb), step


def test_vmapped_seeds_run_one_after_another(simulated):
    algo, board = simulated
    agent, ffi, on_board = agents(algo, board_call(board))
    keys = jax.random.split(jax.random.key(2), 2)
    states = jax.vmap(agent.init)(keys)
    data, w = jax.vmap(lambda k: batch_of(algo, k))(keys)
    got = jax.jit(jax.vmap(on_board.update))(states, data, w, keys)
    want = jax.jit(jax.vmap(ffi.update))(states, data, w, keys)
    assert same(got, want)


class Counting:
    """A board that counts the info commands it is sent; ``answer`` rewrites their answers."""

    def __init__(self, board, answer=None):
        self.board, self.answer, self.infos = board, answer, 0

    def run(self, cmd, hyper, inputs, out_words):
        back, out = self.board.run(cmd, hyper, inputs, out_words)
        if int(cmd[0]) == INFO:
            self.infos += 1
            if self.answer is not None:
                out = self.answer(out.copy())
        return back, out


def test_the_build_is_asked_once(simulated):
    algo, board = simulated
    counting = Counting(board)
    agent, _, on_board = agents(algo, board_call(counting))
    state, key = agent.init(jax.random.key(3)), jax.random.key(3)
    update = jax.jit(on_board.update)
    for step in range(3):
        data, w = batch_of(algo, jax.random.fold_in(key, step))
        state, _, _ = update(state, data, w, key)
    assert counting.infos == 1


def refused(algo: str, board, match: str) -> None:
    agent, _, on_board = agents(algo, board_call(board))
    state = agent.init(jax.random.key(0))
    data, w = batch_of(algo, jax.random.key(0))
    with pytest.raises(Exception, match=match):
        jax.block_until_ready(jax.jit(on_board.update)(state, data, w, jax.random.key(0)))


def test_a_bitstream_of_another_network_is_refused_naming_each_value(tmp_path):
    other = SimulatedLearnerBoard(LearnerBuild(0, 4, 3, (64, 0, 0), 1, 1), tmp_path)
    refused(
        "dqn",
        other,
        r"the bitstream trains another network \(actions 3 there, 2 here; hidden \(64, 0, 0\) "
        r"there, \(64, 64, 0\) here\): rebuild it \(hls/learner/run_hls.tcl\) with "
        r"LEARNER_ALGO=0 LEARNER_OBS=4 LEARNER_ACTIONS=2 LEARNER_H0=64 LEARNER_H1=64",
    )


@pytest.mark.parametrize(
    "answer, match",
    [
        (lambda out: out * 0, "the bitstream does not answer the learner's info command"),
        (lambda out: np.concatenate([out[:2], [7.0], out[3:]]).astype(np.float32),
         "the bitstream speaks learner protocol 7, this driver 1"),
    ],
)  # fmt: skip
def test_a_bitstream_older_or_of_another_protocol_is_refused(simulated, answer, match):
    algo, board = simulated
    refused(algo, Counting(board, answer), match)


@pytest.mark.parametrize("simulated", ["dqn"], indirect=True)  # (discrete actions)
def test_an_action_the_module_would_skip_is_refused(simulated):
    algo, board = simulated
    agent, _, on_board = agents(algo, board_call(board, check=False))
    data, w = batch_of(algo, jax.random.key(0))
    data["action"] = data["action"].at[3].set(5)
    with pytest.raises(Exception, match="learner board: action 5 outside 0..1"):
        jax.block_until_ready(jax.jit(on_board.update)(agent.init(jax.random.key(0)), data, w, 0))


class OnDevice:
    """The top run on a stand-in link's device copies (as the bitstream would)."""

    def __init__(self, board: SimulatedLearnerBoard):
        self.board = board

    def run(self, cmd, hyper, inputs, out):
        views = (cmd.view(np.uint32), hyper.view(np.float64), inputs.view(np.float32))
        self.board.serve(*views, out.view(np.float32))


@pytest.mark.parametrize("driver", ["pynq", "pyxrt"])
def test_the_board_links_move_every_buffer_each_way(simulated, tmp_path, monkeypatch, driver):
    algo, board = simulated
    bitstream = tmp_path / "learner.xclbin"
    bitstream.write_bytes(b"")
    if driver == "pynq":
        module = pynq_module(OnDevice(board), kernel="learner")
    else:
        module = pyxrt_module(OnDevice(board), kernel_name="learner_top")
    monkeypatch.setitem(sys.modules, driver, module)
    link = open_learner_board(bitstream, BUILDS[algo], driver=driver)
    assert isinstance(link, PynqLearnerBoard if driver == "pynq" else XrtLearnerBoard)
    agent, ffi, on_link = agents(algo, board_call(link))
    key = jax.random.key(4)
    a = b = agent.init(key)
    for step in range(2):
        data, w = batch_of(algo, jax.random.fold_in(key, step))
        a, pa, _ = jax.jit(ffi.update)(a, data, w, key)
        b, pb, _ = jax.jit(on_link.update)(b, data, w, key)
        assert same(a, b) and same(pa, pb)
    if driver == "pynq":  # only the words a command uses cross the link, each way
        ins = [n for way, n in link.bufs[2].synced if way == "to"]
        outs = [n for way, n in link.bufs[3].synced if way == "from"]
        assert 4 in ins and max(ins) <= link.bufs[2].nbytes  # the store's one word
        assert min(outs) < link.bufs[3].nbytes  # the step's outputs, not the memories' room


def test_what_is_missing_is_named(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyxrt", None)
    monkeypatch.setitem(sys.modules, "pynq", None)
    with pytest.raises(BackendUnavailable, match="no pyxrt: .*; no pynq: "):
        open_learner_board(tmp_path / "x.xclbin", BUILDS["dqn"])
    with pytest.raises(ValueError, match="driver must be auto or one of"):
        open_learner_board(tmp_path / "x.xclbin", BUILDS["dqn"], driver="vitis")


def test_a_network_the_module_cannot_build_is_refused(tmp_path):
    with pytest.raises(ValueError, match="the learner top does not build for"):
        SimulatedLearnerBoard(LearnerBuild(0, 4, 2, (0, 64, 0), 1, 1), tmp_path)

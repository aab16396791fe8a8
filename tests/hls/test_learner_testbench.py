"""The learner module's cycle model (`drlhet.dse.devices.learner_cycles`) against the testbench's
stepped count of the same loops (``hls/learner/learner_tb.cpp --cycles``)."""

from __future__ import annotations

import dataclasses

import pytest

from drlhet.dse.devices import learner_cycles
from drlhet.dse.devices.learner_testbench import build, stepped_cycles

NETWORKS = [  # (obs_dim, hidden, actions, dueling, double)
    (8, (64,), 4, False, True),  # the authors' DQN learner, 8-64-4
    (4, (64, 64), 2, True, True),  # drlhet's CartPole DQN
    (16, (256, 256, 128), 6, True, False),  # the module's largest sizes
]


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    return build(tmp_path_factory.mktemp("learner_tb"))


@pytest.mark.parametrize("net", NETWORKS)
@pytest.mark.parametrize("batch", [8, 16, 64, 256])
def test_the_cycle_model_agrees_with_the_stepped_count(exe, net, batch):
    obs_dim, hidden, actions, dueling, double = net
    stepped, params = stepped_cycles(exe, obs_dim, hidden, actions, batch, dueling, double)
    model = learner_cycles.dqn_step_cycles(obs_dim, hidden, actions, batch, dueling, double)
    assert abs(model / stepped - 1) <= 0.05, (net, batch, model, stepped)
    heads = (1, actions) if dueling else (actions,)
    assert params == sum(i * o + o for i, o in learner_cycles.layers(obs_dim, hidden, heads))


def test_the_stepped_count_sees_the_adders_latency(exe):
    """Below P_BATCH * add samples the forward accumulators recur faster than the adder
    finishes: per sample the step gets dearer, as the closed form says; and a slower adder
    costs more cycles in the model."""
    per_sample = {}
    for b in (8, 64):
        stepped, _ = stepped_cycles(exe, 4, (64, 64), 2, b)
        per_sample[b] = stepped / b
    assert per_sample[8] > 2 * per_sample[64]
    slow = dataclasses.replace(learner_cycles.Timing(), add=9)
    assert learner_cycles.dqn_step_cycles(4, (64, 64), 2, 8, t=slow) > (
        learner_cycles.dqn_step_cycles(4, (64, 64), 2, 8)
    )


def test_a_network_outside_the_module_is_refused(exe):
    with pytest.raises(ValueError, match="outside the module"):
        stepped_cycles(exe, 4, (512,), 2, 64)
    with pytest.raises(ValueError, match="outside the module"):
        stepped_cycles(exe, 4, (64,), 2, 1024)

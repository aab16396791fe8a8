"""The agents' hyper-parameter ranges: every field of both configurations has a rule, each
rule refuses the values just outside its range (NaN included) and accepts its edges, and a
refusal names the field and the value before anything is built."""

from __future__ import annotations

import dataclasses
import math

import pytest

from drlhet.agents import ddpg, dqn
from drlhet.agents.ranges import HyperparameterError, check_ranges
from drlhet.runtime.config import ConfigError, TrainConfig, check

NAN, INF = math.nan, math.inf

# field -> (values out of range, values at or inside its edges)
DQN_CASES = {
    "hidden": ([(0,), (64, 0), (-1,)], [(), (1,), (64, 64)]),
    "learning_rate": ([0.0, -1e-3, NAN, INF], [1e-9, 1.0]),
    "gamma": ([-0.01, 1.01, NAN], [0.0, 1.0]),
    "target_period": ([-1], [0, 1]),
    "tau": ([0.0, 1.5, NAN], [1e-6, 1.0]),
    "huber_delta": ([0.0, -1.0, NAN, INF], [1e-6]),
    "max_grad_norm": ([0.0, -1.0, NAN], [1e-6, INF]),
    "epsilon_start": ([-0.1, 2.0, NAN], [0.0, 1.0]),
    "epsilon_end": ([-0.1, 2.0, NAN], [0.0, 1.0]),
    "epsilon_steps": ([-5], [0, 1]),
    "priority_eps": ([0.0, -1e-6, NAN, INF], [1e-12, 1e-6]),
}
DDPG_CASES = {
    "hidden": ([(0,), (256, 0)], [(), (8,)]),
    "actor_lr": ([0.0, NAN, INF], [1e-9]),
    "critic_lr": ([-1.0, NAN], [1e-9]),
    "gamma": ([1.5, NAN], [0.0, 1.0]),
    "tau": ([0.0, 2.0, NAN], [1.0]),
    "exploration_noise": ([-0.1, NAN, INF], [0.0]),
    "target_noise": ([-0.1, NAN], [0.0]),
    "target_noise_clip": ([-0.5, INF], [0.0]),
    "policy_delay": ([0, -1], [1]),
    "priority_eps": ([0.0, -1.0, NAN], [1e-6]),
}
AGENTS = [(dqn.DQNConfig, dqn.RANGES, DQN_CASES), (ddpg.DDPGConfig, ddpg.RANGES, DDPG_CASES)]


@pytest.mark.parametrize("config_type, rules, cases", AGENTS, ids=["dqn", "ddpg"])
def test_every_numeric_field_has_a_rule_and_a_case(config_type, rules, cases):
    numeric = {
        f.name
        for f in dataclasses.fields(config_type)
        if not isinstance(getattr(config_type(), f.name), bool)
    }
    assert set(rules) == numeric == set(cases)
    check_ranges(config_type(), rules)  # the defaults are in range


@pytest.mark.parametrize("config_type, rules, cases", AGENTS, ids=["dqn", "ddpg"])
def test_values_out_of_range_are_refused_naming_field_and_value(config_type, rules, cases):
    for field, (bad, good) in cases.items():
        for value in bad:
            with pytest.raises(HyperparameterError) as e:
                check_ranges(config_type(**{field: value}), rules)
            assert e.value.field == field
            assert str(e.value).startswith(f"{field} must be ") and repr(value) in str(e.value)
        for value in good:
            check_ranges(config_type(**{field: value}), rules)


def test_the_agents_refuse_before_building():
    with pytest.raises(ValueError, match="learning_rate must be finite and > 0, got nan"):
        dqn.make_dqn(dqn.DQNConfig(learning_rate=NAN), (4,), 2)
    with pytest.raises(ValueError, match=r"tau must be in \(0, 1\], got 2.0"):
        ddpg.make_ddpg(ddpg.DDPGConfig(tau=2.0), (3,), 1, -2.0, 2.0)


@pytest.mark.parametrize(
    "change, message, field",
    [
        ({"dqn": dqn.DQNConfig(gamma=1.5)}, "dqn.gamma must be in [0, 1], got 1.5", "dqn.gamma"),
        # the algorithm not run is checked too: a value set for it is not silently kept
        ({"algo": "dqn", "ddpg": ddpg.DDPGConfig(policy_delay=0)}, "ddpg.policy_delay", None),
        ({"beta_start": 3.0}, "beta_start must be in [0, 1], got 3.0", "beta_start"),
        ({"alpha": NAN}, "alpha must be finite and >= 0, got nan", "alpha"),
        ({"seed": -1}, "seed must be in [0, 4294967295]", "seed"),
        ({"seed": 2**32}, "got 4294967296", "seed"),
    ],
)
def test_the_run_configuration_names_the_agent_field(change, message, field):
    with pytest.raises(ConfigError) as e:
        check(dataclasses.replace(TrainConfig(), **change))
    assert message in str(e.value)
    if field is not None:
        assert e.value.fields == (field,)
    check(dataclasses.replace(TrainConfig(), seed=2**32 - 1))  # the largest seed is kept

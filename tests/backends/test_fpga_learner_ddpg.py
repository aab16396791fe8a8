"""The FPGA learner module's DDPG / TD3 step (C-simulated) against the flax/optax step.

The same yardstick as tests/backends/test_fpga_learner.py: both are measured against the JAX
step in float64, on every leaf of the learner state, the priorities and the metrics; the
module's error is within 1e-5 of the leaf's scale, or within 4x flax's own float32 error where
float32 cannot do better (a cancelling sum).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from drlhet import backends
from drlhet.agents.ddpg import DDPGConfig, make_ddpg
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import run
from tests.backends.test_fpga_learner import _f64, errors

LOW, HIGH = -2.0, 2.0


@pytest.fixture(scope="module")
def wrap():
    return backends.learner_step("fpga")


def batch_of(key, b, d, m):
    ks = jax.random.split(key, 6)
    data = {
        "obs": jax.random.normal(ks[0], (b, d)),
        "action": jax.random.uniform(ks[1], (b, m), minval=LOW, maxval=HIGH),
        "reward": jax.random.normal(ks[2], (b,)),
        "discount": 0.99 * (jax.random.uniform(ks[3], (b,)) > 0.1),
        "next_obs": jax.random.normal(ks[4], (b, d)),
    }
    return data, jax.random.uniform(ks[5], (b,), minval=0.1, maxval=1.0)


def _normal32(normal):
    """jax.random.normal drawing float32 whatever x64 says (the float64 yardstick must see the
    same TD3 noise as the float32 runs)."""
    return lambda key, shape=(), dtype=None: normal(key, shape, jnp.float32).astype(
        dtype or jnp.float64
    )


def warm_state(agent, d, m, b, key, steps):
    """A learner state a few reference steps in (non-zero Adam moments, targets apart from the
    online networks), its step count set to ``steps``."""
    state = agent.init(key)
    update = jax.jit(agent.update)
    for k in jax.random.split(jax.random.fold_in(key, 7), 3):
        state = update(state, *batch_of(k, b, d, m), k)[0]
    return state._replace(steps=jnp.int32(steps))


def one_step(config, wrap, b, d, m, steps, monkeypatch, seed=0):
    """(flax float32, module, flax float64) outputs of one step from the same state and batch."""
    agent = make_ddpg(config, (d,), m, LOW, HIGH)
    sim = wrap("ddpg", config, agent, (d,), m, b, bounds=(LOW, HIGH))
    key = jax.random.key(seed)
    state = warm_state(agent, d, m, b, key, steps)
    data, w = batch_of(jax.random.fold_in(key, 1), b, d, m)
    ref = jax.jit(agent.update)(state, data, w, key)
    got = jax.jit(sim.update)(jax.tree.map(jnp.copy, state), data, w, key)
    with jax.enable_x64(True), monkeypatch.context() as mp:
        mp.setattr(jax.random, "normal", _normal32(jax.random.normal))
        st64, d64, w64 = jax.tree.map(_f64, (state, data, w))
        truth = jax.tree.map(np.asarray, jax.jit(agent.update)(st64, d64, w64, key))
    return ref, got, truth


CASES = {  # name: (config, obs_dim, action_dim, steps before the step)
    "DDPG 64x64, Pendulum's sizes": (DDPGConfig(hidden=(64, 64)), 3, 1, 0),
    "DDPG 32, the authors' 8-32-4 / 12-32-1": (DDPGConfig(hidden=(32,)), 8, 4, 0),
    "TD3 64x32, an actor step": (DDPGConfig(hidden=(64, 32), td3=True), 5, 2, 1),
    "TD3 64x32, a critic-only step": (DDPGConfig(hidden=(64, 32), td3=True), 5, 2, 2),
}


def _parts(out):
    state, priorities, m = out
    return (state, priorities, m["loss"], m["actor_loss"], m["abs_td"])


@pytest.mark.parametrize("name", list(CASES))
# 16 and 256 are the module's ends (batches of 1..256); 64 in between runs with `make test-slow`
@pytest.mark.parametrize("b", [16, pytest.param(64, marks=pytest.mark.slow), 256])
def test_one_step_matches_flax_and_optax(wrap, name, b, monkeypatch):
    config, d, m, steps = CASES[name]
    ref, got, truth = one_step(config, wrap, b, d, m, steps, monkeypatch)
    flax_err = errors(_parts(truth), _parts(ref))
    sim_err = errors(_parts(truth), _parts(got))
    bad = [(s, f) for s, f in zip(sim_err, flax_err, strict=True) if s > max(1e-5, 4 * f)]
    assert not bad, (name, b, bad)
    st_r, st_g = ref[0], got[0]
    assert int(st_g.steps) == int(st_r.steps) == steps + 1
    for opt in ("actor_opt", "critic_opt"):
        assert int(getattr(st_g, opt)[0].count) == int(getattr(st_r, opt)[0].count)


def test_td3_leaves_the_actor_and_targets_alone_off_its_delay(wrap, monkeypatch):
    """On a step that does not train the actor, the actor, its Adam state and the targets come
    back bit for bit; the critics move."""
    config, d, m, _ = CASES["TD3 64x32, a critic-only step"]
    _, got, _ = one_step(config, wrap, 64, d, m, 2, monkeypatch)
    agent = make_ddpg(config, (d,), m, LOW, HIGH)
    before = warm_state(agent, d, m, 64, jax.random.key(0), 2)
    after = got[0]
    for name in ("actor", "target_actor", "target_critic", "actor_opt"):
        same = jax.tree.map(jnp.array_equal, getattr(before, name), getattr(after, name))
        assert all(bool(x) for x in jax.tree.leaves(same)), name
    moved = jax.tree.map(jnp.array_equal, before.critic, after.critic)
    assert not all(bool(x) for x in jax.tree.leaves(moved))


def test_a_thousand_steps_stay_within_1e_3(wrap):
    """1,000 DDPG steps (64x64, B 64, the same batches) from the same start: the module's
    parameters stay within 1e-3 of flax's."""
    config, b, d, m = DDPGConfig(hidden=(64, 64)), 64, 3, 1
    agent = make_ddpg(config, (d,), m, LOW, HIGH)
    sim = wrap("ddpg", config, agent, (d,), m, b, bounds=(LOW, HIGH))
    key = jax.random.key(0)
    start = agent.init(key)
    keys = jax.random.split(key, 1000)

    def run_with(update, state):
        def step(s, k):
            return update(s, *batch_of(k, b, d, m), k)[0], None

        return jax.tree.map(np.asarray, jax.jit(lambda s: jax.lax.scan(step, s, keys)[0])(state))

    ref = run_with(agent.update, start)
    got = run_with(sim.update, jax.tree.map(jnp.copy, start))
    assert int(got.steps) == int(ref.steps) == 1000
    assert max(errors((ref.actor, ref.critic), (got.actor, got.critic))) <= 1e-3


def test_a_critic_input_wider_than_the_module_is_refused():
    cfg = TrainConfig(algo="ddpg", env="Pendulum-v1", steps=2_000, warmup=1_000, seeds=1)
    cfg = dataclasses.replace(cfg, ddpg=dataclasses.replace(cfg.ddpg, hidden=(300,)))
    with pytest.raises(ValueError, match="1..256 wide"):
        run(cfg, "actors=cpu:0,replay=jax@cpu:0,learner=fpga@cpu:0")


def test_an_is_weighted_actor_is_refused(wrap):
    config = DDPGConfig(hidden=(16,), actor_is_weights=True)
    agent = make_ddpg(config, (3,), 1, LOW, HIGH)
    with pytest.raises(ValueError, match="actor_is_weights"):
        wrap("ddpg", config, agent, (3,), 1, 64, bounds=(LOW, HIGH))
    # in a run, the field is named as the configuration spells it (the CLI: as its option)
    from drlhet.runtime.config import ConfigError
    from drlhet.runtime.trainer import make_trainer

    cfg = TrainConfig(algo="ddpg", env="Pendulum-v1", learner="fpga", ddpg=config)
    with pytest.raises(ConfigError, match="ddpg.actor_is_weights=True") as e:
        make_trainer(cfg)
    assert e.value.fields == ("ddpg.actor_is_weights",)


def test_training_runs_the_module_in_the_fused_loop(wrap):
    """A short TD3 run on Pendulum with the learner on the module: the state moves, the actor
    trains one step in policy_delay, and the losses are finite."""
    cfg = TrainConfig(
        algo="ddpg",
        env="Pendulum-v1",
        steps=1_400,
        warmup=1_000,
        eval_every=200,
        seeds=2,
        buffer_size=4_096,
    )
    cfg = dataclasses.replace(cfg, ddpg=dataclasses.replace(cfg.ddpg, hidden=(64, 64), td3=True))
    state, history = run(cfg, "actors=cpu:0,replay=native@cpu:0,learner=fpga@cpu:0")
    steps = int(state.agent.steps[0])
    assert steps > 0
    assert int(state.agent.critic_opt[0].count[0]) == steps
    assert int(state.agent.actor_opt[0].count[0]) == steps // 2
    assert len(history) == 2 and all(np.isfinite(h["loss"]).all() for h in history)


def _short_last(target, out_types, aliased):
    """The FFI call with its last operand one row short (TD3's noise; DQN's weights)."""
    from drlhet.backends.fpga import _learner_call

    real = _learner_call(target, out_types, aliased)
    return lambda *ops, **attrs: real(*ops[:-1], ops[-1][:-1], **attrs)


@pytest.mark.parametrize("algo", ["ddpg", "dqn"])
def test_the_ffi_refuses_an_operand_shorter_than_the_step_reads(algo):
    """The C-simulation's handlers read B rows of every field: one of B - 1 rows read past its
    buffer (DDPG's noise was never checked, DQN's weights, discount and next_obs neither).
    The Python wrapper shapes every operand; a direct FFI caller is now refused by name."""
    from drlhet.agents.dqn import DQNConfig, make_dqn
    from drlhet.backends import fpga_learner
    from tests.backends.test_fpga_learner import batch_of as dqn_batch

    if algo == "ddpg":
        config = DDPGConfig(hidden=(16,), td3=True)
        agent = make_ddpg(config, (3,), 1, LOW, HIGH)
        sim = fpga_learner.wrap("ddpg", config, agent, (3,), 1, 8, _short_last, (LOW, HIGH))
        data, w = batch_of(jax.random.key(1), 8, 3, 1)
        match = "operand 17 holds 7 values, the step reads 8"
    else:
        config = DQNConfig(hidden=(8,))
        agent = make_dqn(config, (4,), 2)
        sim = fpga_learner.wrap("dqn", config, agent, (4,), 2, 8, _short_last)
        data, w = dqn_batch(jax.random.key(1), 8)
        match = "weights holds 7 values, the step reads 8"
    with pytest.raises(Exception, match=match):
        jax.block_until_ready(
            jax.jit(sim.update)(agent.init(jax.random.key(0)), data, w, jax.random.key(0))
        )

"""Agents on probe environments with known values, and the training loop's invariants."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from drlhet.agents.ddpg import DDPGConfig, make_ddpg
from drlhet.agents.dqn import DQNConfig, make_dqn
from drlhet.agents.losses import double_q_td, huber
from drlhet.envs import make_env
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import run
from drlhet.runtime.trainer import make_trainer

FAST = dict(
    steps=3_000,
    num_envs=4,
    warmup=200,
    batch_size=32,
    buffer_size=2_000,
    eval_every=400,
    eval_envs=4,
    sgd_steps=1,
    n_step=1,
)


def trained_agent(cfg):
    tr = make_trainer(cfg)
    state = tr.warmup(tr.init(jax.random.key(0)))
    chunk = jax.jit(tr.chunk)
    for _ in range(tr.chunks):
        state, _ = chunk(state)
    return tr, state


def q_values(state, obs, hidden=(32,)):
    from drlhet.agents.networks import QNetwork

    return QNetwork(hidden, 2, DQNConfig().dueling).apply(state.agent.params, obs)


# gamma 0.5, not the default 0.99: Q(0) = gamma on probe-two-step, and 0.99 lay within the
# tolerance of 1.0, the value of a run that never discounts
GAMMA = 0.5
LEARNS = DQNConfig(hidden=(32,), learning_rate=3e-3, epsilon_steps=500, gamma=GAMMA)


@pytest.mark.parametrize(
    "env, obs, expected",
    [
        ("probe-constant", [[1.0]], [[1.0, 1.0]]),
        ("probe-two-step", [[0.0], [1.0]], [[GAMMA, GAMMA], [1.0, 1.0]]),
        ("probe-action", [[0.0], [1.0]], [[1.0, 0.0], [0.0, 1.0]]),
    ],
)
def test_dqn_learns_known_values(env, obs, expected):
    cfg = TrainConfig(env=env, dqn=LEARNS, **FAST)
    tr, state = trained_agent(cfg)
    q = q_values(state, jnp.asarray(obs))
    np.testing.assert_allclose(q, expected, atol=0.1)


def test_ddpg_learns_the_best_action():
    cfg = TrainConfig(
        algo="ddpg",
        env="probe-continuous",
        ddpg=DDPGConfig(hidden=(32, 32), actor_lr=3e-3, critic_lr=3e-3),
        **FAST,
    )
    tr, state = trained_agent(cfg)
    a = tr.agent.act(state.agent, jnp.ones((1, 1)), jax.random.key(0), 0, explore=False)
    assert abs(float(a[0, 0]) - 0.5) < 0.1


def test_dqn_update_returns_abs_td_plus_eps():
    agent = make_dqn(DQNConfig(hidden=(8,), priority_eps=1e-3), (3,), 2)
    state = agent.init(jax.random.key(0))
    rng = np.random.default_rng(0)
    batch = {
        "obs": jnp.asarray(rng.random((5, 3)), jnp.float32),
        "action": jnp.asarray([0, 1, 1, 0, 1], jnp.int32),
        "reward": jnp.asarray(rng.random(5), jnp.float32),
        "discount": jnp.asarray([0.99, 0.0, 0.99, 0.99, 0.5], jnp.float32),
        "next_obs": jnp.asarray(rng.random((5, 3)), jnp.float32),
    }
    _, prio, _ = agent.update(state, batch, jnp.ones(5), jax.random.key(1))
    from drlhet.agents.networks import QNetwork

    net = QNetwork((8,), 2, True)
    q = net.apply(state.params, batch["obs"])
    q_next_t = net.apply(state.target_params, batch["next_obs"])
    q_next_o = net.apply(state.params, batch["next_obs"])
    td = jax.vmap(double_q_td)(
        q, batch["action"], batch["reward"], batch["discount"], q_next_t, q_next_o
    )
    np.testing.assert_allclose(prio, np.abs(td) + 1e-3, rtol=1e-5)


def test_ddpg_update_returns_abs_td_plus_eps():
    agent = make_ddpg(DDPGConfig(hidden=(8,), priority_eps=1e-3), (3,), 1, -2.0, 2.0)
    state = agent.init(jax.random.key(0))
    batch = {
        "obs": jnp.ones((4, 3)),
        "action": jnp.zeros((4, 1)),
        "reward": jnp.arange(4.0),
        "discount": jnp.full((4,), 0.9),
        "next_obs": jnp.zeros((4, 3)),
    }
    _, prio, _ = agent.update(state, batch, jnp.ones(4), jax.random.key(1))
    from drlhet.agents.networks import Actor, Critic

    q = Critic((8,)).apply(
        jax.tree.map(lambda x: x[0], state.critic), batch["obs"], batch["action"]
    )
    a_t = Actor((8,), 1, -2.0, 2.0).apply(state.target_actor, batch["next_obs"])
    q_t = Critic((8,)).apply(
        jax.tree.map(lambda x: x[0], state.target_critic), batch["next_obs"], a_t
    )
    np.testing.assert_allclose(prio, np.abs(batch["reward"] + 0.9 * q_t - q) + 1e-3, rtol=1e-5)


def test_td3_priorities_are_the_larger_of_the_twin_critics_td():
    """TD3's priorities: max over its two critics of |TD| + eps (the PER / LAP reference's)."""
    cfg = DDPGConfig(hidden=(8,), priority_eps=1e-3, td3=True, target_noise=0.0)
    agent = make_ddpg(cfg, (3,), 1, -2.0, 2.0)
    state = agent.init(jax.random.key(0))
    batch = {
        "obs": jax.random.normal(jax.random.key(2), (16, 3)),
        "action": jax.random.uniform(jax.random.key(3), (16, 1), minval=-2.0, maxval=2.0),
        "reward": jnp.arange(16.0) / 4.0,
        "discount": jnp.full((16,), 0.9),
        "next_obs": jax.random.normal(jax.random.key(4), (16, 3)),
    }
    _, prio, metrics = agent.update(state, batch, jnp.ones(16), jax.random.key(1))
    from drlhet.agents.networks import Actor, Critic

    a_t = Actor((8,), 1, -2.0, 2.0).apply(state.target_actor, batch["next_obs"])

    def q(params, i, obs, act):
        return Critic((8,)).apply(jax.tree.map(lambda x: x[i], params), obs, act)

    q_t = jnp.minimum(*(q(state.target_critic, i, batch["next_obs"], a_t) for i in (0, 1)))
    y = batch["reward"] + 0.9 * q_t
    td = np.abs([y - q(state.critic, i, batch["obs"], batch["action"]) for i in (0, 1)])
    assert (td[1] > td[0]).any() and (td[0] > td[1]).any()  # both critics decide some rows
    np.testing.assert_allclose(prio, td.max(axis=0) + 1e-3, rtol=1e-5)
    np.testing.assert_allclose(metrics["abs_td"], td.max(axis=0).mean(), rtol=1e-5)


def test_huber():
    np.testing.assert_allclose(huber(jnp.array([0.5, -2.0])), [0.125, 1.5])


def test_env_adapter_bootstraps_truncation_not_termination():
    env = make_env("CartPole-v1", 2)
    assert env.max_steps == 500 and env.discrete and env.num_actions == 2
    obs, state = env.reset(jax.random.key(0))
    step = jax.jit(env.step)
    saw_term = False
    for i in range(300):
        state, st = step(state, jnp.zeros((2,), jnp.int32), jax.random.key(i))
        if bool(st.terminated.any()):
            saw_term = True
            j = int(jnp.argmax(st.terminated))
            assert not bool(st.truncated[j])
            # next_obs is the final observation, obs the reset one
            assert not np.allclose(st.next_obs[j], st.obs[j])
    assert saw_term
    # Pendulum never terminates: its time limit (200 steps) is a truncation, from the final obs
    env = make_env("Pendulum-v1", 2)
    obs, state = env.reset(jax.random.key(0))
    step = jax.jit(env.step)
    for i in range(env.max_steps):
        state, st = step(state, jnp.zeros((2, 1)), jax.random.key(i))
        assert not bool(st.terminated.any())
        assert bool(st.truncated.all()) == (i == env.max_steps - 1)
    assert not np.allclose(st.next_obs, st.obs)
    with pytest.raises(ValueError, match="unknown environment"):
        make_env("NoSuchEnv-v0")


def test_chunk_compiles_once():
    cfg = TrainConfig(env="probe-constant", dqn=DQNConfig(hidden=(8,)), **FAST)
    tr = make_trainer(cfg)
    traces = []

    def counted(state):
        traces.append(1)
        return tr.chunk(state)

    chunk = jax.jit(counted, donate_argnums=0)
    state = tr.warmup(tr.init(jax.random.key(0)))
    for _ in range(3):
        state, _ = chunk(state)
    assert len(traces) == 1


def test_vmap_over_seeds_matches_separate_runs():
    cfg = TrainConfig(
        env="probe-two-step", seeds=2, dqn=DQNConfig(hidden=(8,)), **{**FAST, "steps": 1_000}
    )
    states, rows = run(cfg)
    tr = make_trainer(cfg)
    keys = jax.random.split(jax.random.key(cfg.seed), 2)
    for s in range(2):
        one = tr.warmup(tr.init(keys[s]))
        for _ in range(tr.chunks):
            one, _ = jax.jit(tr.chunk)(one)
        for a, b in zip(
            jax.tree.leaves(one.agent.params),
            jax.tree.leaves(jax.tree.map(lambda x, s=s: x[s], states.agent.params)),
            strict=True,
        ):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_bad_training_configuration():
    with pytest.raises(ValueError, match="continuous"):
        make_trainer(TrainConfig(algo="ddpg", env="CartPole-v1"))
    with pytest.raises(ValueError, match="discrete"):
        make_trainer(TrainConfig(algo="dqn", env="Pendulum-v1"))
    with pytest.raises(ValueError, match="multiple of num_envs"):
        make_trainer(dataclasses.replace(TrainConfig(), eval_every=1001))


@pytest.mark.parametrize(
    "name",
    ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "MountainCarContinuous-v0"],
)
def test_every_gymnax_env_steps_in_batches(name):
    env = make_env(name, 3)
    obs, state = env.reset(jax.random.key(0))
    assert obs.shape == (3,) + env.obs_shape
    if env.discrete:
        action = jnp.ones((3,), jnp.int32)
    else:
        action = jnp.full((3, env.action_dim), env.action_high, jnp.float32)
    state, st = jax.jit(env.step)(state, action, jax.random.key(1))
    assert st.obs.shape == st.next_obs.shape == obs.shape
    assert st.reward.shape == st.terminated.shape == st.truncated.shape == (3,)
    assert env.max_steps > 0


def continuous_batch():
    """4 transitions of a 3-dimensional observation and a 1-dimensional action."""
    return {
        "obs": jnp.ones((4, 3)),
        "action": jnp.zeros((4, 1)),
        "reward": jnp.ones(4),
        "discount": jnp.full((4,), 0.9),
        "next_obs": jnp.zeros((4, 3)),
    }


def test_td3_update_runs_and_delays_the_actor():
    agent = make_ddpg(DDPGConfig(hidden=(8,), td3=True, policy_delay=2), (3,), 1, -1.0, 1.0)
    state = agent.init(jax.random.key(0))
    batch = continuous_batch()
    s1, prio, _ = agent.update(state, batch, jnp.ones(4), jax.random.key(1))
    assert prio.shape == (4,) and bool(jnp.all(prio > 0))
    same = jax.tree.map(lambda a, b: bool(jnp.all(a == b)), s1.actor, state.actor)
    assert all(jax.tree.leaves(same))  # step 1: actor not updated yet
    s2, _, _ = agent.update(s1, batch, jnp.ones(4), jax.random.key(2))
    moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), s2.actor, s1.actor)
    assert any(jax.tree.leaves(moved))  # step 2: updated


@pytest.mark.parametrize("weighted", [False, True])
def test_ddpg_actor_loss_is_weighted_only_when_asked(weighted):
    config = DDPGConfig(hidden=(8,), actor_is_weights=weighted)
    agent = make_ddpg(config, (3,), 1, -1.0, 1.0)
    state = agent.init(jax.random.key(0))
    batch = continuous_batch()
    w = jnp.array([1.0, 0.25, 0.5, 0.0])
    new, _, metrics = agent.update(state, batch, w, jax.random.key(1))
    from drlhet.agents.networks import Actor, Critic

    a = Actor((8,), 1, -1.0, 1.0).apply(state.actor, batch["obs"])  # the actor before its step
    q = Critic((8,)).apply(jax.tree.map(lambda x: x[0], new.critic), batch["obs"], a)
    expected = -jnp.mean(w * q) if weighted else -jnp.mean(q)  # against the updated critic
    np.testing.assert_allclose(metrics["actor_loss"], expected, rtol=1e-6)


def test_td3_target_noise_comes_from_the_callers_key():
    # a key made from a constant inside the agent repeated the same target noise every step
    agent = make_ddpg(DDPGConfig(hidden=(8,), td3=True, target_noise=0.5), (3,), 1, -1.0, 1.0)
    state = agent.init(jax.random.key(0))
    batch = continuous_batch()
    with pytest.raises(TypeError):
        agent.update(state, batch, jnp.ones(4))  # no key: refused, never a constant one
    k1, k2 = jax.random.split(jax.random.key(7))
    _, p1, _ = agent.update(state, batch, jnp.ones(4), k1)
    _, p2, _ = agent.update(state, batch, jnp.ones(4), k2)
    _, p1_again, _ = agent.update(state, batch, jnp.ones(4), k1)
    # two consecutive draws of the target noise differ (so do the TD errors); same key, same
    np.testing.assert_array_equal(p1, p1_again)
    assert not np.array_equal(p1, p2)


def test_dqn_learns_with_delayed_priority_updates():
    cfg = TrainConfig(
        env="probe-two-step",
        delay=3,
        dqn=LEARNS,
        **FAST,
    )
    _, state = trained_agent(cfg)
    q = q_values(state, jnp.asarray([[0.0], [1.0]]))
    np.testing.assert_allclose(q, [[GAMMA, GAMMA], [1.0, 1.0]], atol=0.1)
    assert state.pending.indices.shape == (3, cfg.batch_size)


def test_an_image_observation_is_flattened_for_the_networks():
    # MinAtar's [10, 10, 4] observations reached the MLPs whole: the Q-values came out per pixel
    # ([N, 10, 10, A]) and the chunk failed to trace
    cfg = TrainConfig(
        env="Breakout-MinAtar", steps=64 + 64, warmup=64, eval_every=64, eval_envs=2,
        batch_size=8, buffer_size=256, num_envs=4,
    )  # fmt: skip
    tr = make_trainer(cfg)
    assert tr.env.obs_shape == (400,)
    state = jax.eval_shape(tr.init, jax.random.key(0))
    assert state.obs.shape == (4, 400)
    _, summary = jax.eval_shape(tr.chunk, state)
    assert summary["eval_return"].shape == ()


def test_a_gymnax_action_space_whose_dimensions_differ_is_refused_not_collapsed():
    # the agents scale one range: (-1, 1) and (-2, 2) were taken as (-2, 2) for both
    from types import SimpleNamespace

    from drlhet.envs import _uniform_bounds

    assert _uniform_bounds(SimpleNamespace(low=np.full(3, -2.0), high=np.full(3, 2.0))) == (-2, 2)
    assert _uniform_bounds(SimpleNamespace()) == (-1.0, 1.0)  # discrete: no bounds
    with pytest.raises(ValueError, match=r"bounds differ per dimension \(low \[-1.0, -2.0\]"):
        _uniform_bounds(SimpleNamespace(low=np.array([-1.0, -2.0]), high=np.array([1.0, 2.0])))

"""DQN's update, target network and exploration against a reference written independently:
double or plain Q-learning targets, importance-weighted Huber loss, global-norm gradient
clipping, Adam, hard and Polyak target updates, and the linear epsilon-greedy schedule."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from drlhet.agents.dqn import DQNConfig, linear_schedule, make_dqn
from drlhet.agents.networks import QNetwork

OBS, ACTIONS, B = 3, 3, 8


def batch_of(seed):
    rng = np.random.default_rng(seed)
    return {
        "obs": jnp.asarray(rng.normal(size=(B, OBS)), jnp.float32),
        "action": jnp.asarray(rng.integers(0, ACTIONS, B), jnp.int32),
        "reward": jnp.asarray(rng.normal(scale=2.0, size=B), jnp.float32),
        # terminal rows (0), one-step, three-step and truncated-window discounts
        "discount": jnp.asarray([0.0, 0.9, 0.9**3, 0.0, 0.9**2, 0.9, 0.9**3, 0.9], jnp.float32),
        "next_obs": jnp.asarray(rng.normal(size=(B, OBS)), jnp.float32),
    }


WEIGHTS = jnp.asarray([1.0, 0.5, 0.25, 0.8, 0.1, 1.0, 0.6, 0.3], jnp.float32)


def reference_step(cfg, net, params, target, adam, batch, weights, clip=True):
    """One DQN SGD step written from the papers: ``-> (params, target, adam, priorities)``."""
    q_next_target = np.asarray(net.apply(target, batch["next_obs"]))
    rows = np.arange(B)
    if cfg.double:  # van Hasselt et al. 2016: the online net selects, the target net evaluates
        a_star = np.argmax(np.asarray(net.apply(params, batch["next_obs"])), axis=1)
        boot = q_next_target[rows, a_star]
    else:
        boot = q_next_target.max(axis=1)
    y = np.asarray(batch["reward"]) + np.asarray(batch["discount"]) * boot
    d = cfg.huber_delta

    def loss(p):
        err = y - net.apply(p, batch["obs"])[rows, batch["action"]]
        hub = jnp.where(jnp.abs(err) <= d, 0.5 * err**2, d * jnp.abs(err) - 0.5 * d**2)
        return jnp.mean(weights * hub), err

    (_, err), grads = jax.value_and_grad(loss, has_aux=True)(params)
    norm = np.sqrt(sum(float(jnp.sum(g**2)) for g in jax.tree.leaves(grads)))
    scale = min(1.0, cfg.max_grad_norm / norm) if clip else 1.0
    grads = jax.tree.map(lambda g: g * scale, grads)
    count, m, v = adam
    count += 1
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g**2, v, grads)
    params = jax.tree.map(
        lambda p, m, v: (
            p
            - cfg.learning_rate * (m / (1 - 0.9**count)) / (jnp.sqrt(v / (1 - 0.999**count)) + 1e-8)
        ),
        params,
        m,
        v,
    )
    target = jax.tree.map(lambda p, t: cfg.tau * p + (1 - cfg.tau) * t, params, target)
    return params, target, (count, m, v), np.abs(np.asarray(err)) + cfg.priority_eps


def assert_trees_close(a, b, rtol=2e-5, atol=1e-6):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize("dueling", [True, False])
def test_two_updates_match_the_reference(double, dueling):
    # max_grad_norm small enough that every step is clipped, by different factors (Adam is
    # invariant to one common scale, not to two); huber_delta puts rows on both of its sides
    cfg = DQNConfig(
        hidden=(8,), learning_rate=0.05, double=double, dueling=dueling, tau=0.3,
        huber_delta=0.5, max_grad_norm=1e-2, priority_eps=1e-3,
    )  # fmt: skip
    agent = make_dqn(cfg, (OBS,), ACTIONS)
    net = QNetwork(cfg.hidden, ACTIONS, dueling)
    state = agent.init(jax.random.key(0))
    # a target net apart from the online one, so that double and plain targets differ
    state = state._replace(target_params=net.init(jax.random.key(9), jnp.zeros(OBS)))
    zeros = jax.tree.map(jnp.zeros_like, state.params)
    ref = (state.params, state.target_params, (0, zeros, zeros))
    unclipped = ref
    for step, seed in enumerate((1, 2)):
        batch = batch_of(seed)
        state, prio, _ = agent.update(state, batch, WEIGHTS, jax.random.key(step))
        *ref_state, ref_prio = reference_step(cfg, net, *ref, batch, WEIGHTS)
        ref = tuple(ref_state)
        unclipped = reference_step(cfg, net, *unclipped, batch, WEIGHTS, clip=False)[:3]
        np.testing.assert_allclose(prio, ref_prio, rtol=2e-5)
        assert_trees_close(state.params, ref[0])
        assert_trees_close(state.target_params, ref[1])
    assert int(state.steps) == 2
    # the clipping mattered: without it the second step lands elsewhere
    pairs = zip(jax.tree.leaves(ref[0]), jax.tree.leaves(unclipped[0]), strict=True)
    assert any(not np.allclose(a, b, rtol=1e-3) for a, b in pairs)


def test_the_dueling_head_is_value_plus_centred_advantage():
    net = QNetwork((4,), ACTIONS, dueling=True)
    obs = jax.random.normal(jax.random.key(1), (5, OBS))
    params = net.init(jax.random.key(0), obs)
    p = jax.tree.map(np.asarray, params["params"])
    h = np.maximum(
        np.asarray(obs) @ p["MLP_0"]["Dense_0"]["kernel"] + p["MLP_0"]["Dense_0"]["bias"], 0
    )
    value = h @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]  # [5, 1]
    adv = h @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]  # [5, A]
    expected = value + adv - adv.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(net.apply(params, obs), expected, rtol=1e-5, atol=1e-6)


def test_a_hard_target_update_copies_the_online_net_every_period_steps():
    agent = make_dqn(DQNConfig(hidden=(4,), target_period=3), (OBS,), ACTIONS)
    state = agent.init(jax.random.key(0))
    start = state.target_params
    for step in range(1, 7):
        state, _, _ = agent.update(state, batch_of(step), WEIGHTS, jax.random.key(step))
        if step % 3 == 0:  # after the 3rd, 6th... SGD step: the online net just updated
            assert_trees_close(state.target_params, state.params, rtol=0, atol=0)
            start = state.target_params
        else:
            assert_trees_close(state.target_params, start, rtol=0, atol=0)


def test_linear_schedule_against_hand_computed_values():
    eps = linear_schedule(1.0, 0.1, 100)
    np.testing.assert_allclose(
        [eps(t) for t in (0, 25, 50, 100, 1_000)], [1.0, 0.775, 0.55, 0.1, 0.1], rtol=1e-6
    )
    rising = linear_schedule(0.0, 1.0, 4)
    np.testing.assert_allclose([rising(t) for t in (0, 1, 3, 4, 9)], [0.0, 0.25, 0.75, 1.0, 1.0])


def test_a_schedule_over_no_steps_is_at_its_end_from_the_start():
    # epsilon_steps=0 (allowed) means no decay: epsilon_end from the first env step; it was
    # epsilon_start at env step 0 (0 / max(0, 1) = 0 of the way)
    eps = linear_schedule(1.0, 0.05, 0)
    np.testing.assert_allclose([eps(0), eps(1), eps(100)], [0.05, 0.05, 0.05], rtol=1e-6)


@pytest.mark.parametrize(
    "start, end, steps, env_steps, epsilon",
    [
        (0.3, 0.3, 100, 0, 0.3),
        (1.0, 0.0, 100, 50, 0.5),
        (1.0, 0.2, 100, 400, 0.2),
        (1.0, 0.0, 10, 0, 1.0),
    ],
)
def test_epsilon_greedy_acts_at_random_with_probability_epsilon(
    start, end, steps, env_steps, epsilon
):
    cfg = DQNConfig(hidden=(4,), epsilon_start=start, epsilon_end=end, epsilon_steps=steps)
    agent = make_dqn(cfg, (OBS,), 4)
    state = agent.init(jax.random.key(0))
    n = 40_000
    obs = jnp.zeros((n, OBS))  # one observation: one greedy action
    greedy = agent.act(state, obs, jax.random.key(1), env_steps, explore=False)
    assert bool(jnp.all(greedy == greedy[0]))
    acts = np.asarray(agent.act(state, obs, jax.random.key(2), env_steps))
    # a random action is uniform over all 4, the greedy one included
    counts = np.bincount(acts, minlength=4) / n
    others = np.delete(counts, int(greedy[0]))
    np.testing.assert_allclose(others, epsilon / 4, atol=0.01)
    np.testing.assert_allclose(counts[int(greedy[0])], 1 - 3 * epsilon / 4, atol=0.01)

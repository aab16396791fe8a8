"""DDPG / TD3 maths on hand-set networks: the actor's rescaling to the action bounds, the
exploration and target-smoothing noise (scaled to the bounds, clipped, the action clipped to
the bounds), the weighted critic loss, and TD3's delayed actor and target updates."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from drlhet.agents.ddpg import DDPGConfig, make_ddpg
from drlhet.agents.networks import Actor, Critic

LOW, HIGH = 0.0, 4.0  # asymmetric: the midpoint 2, the half range 2
OBS = 3
OFFSET = 50.0


def actor_with_output_bias(params, bias):
    """``params`` with its last layer's kernel 0 and bias ``bias``: tanh(bias) for every obs."""
    out = dict(params["params"]["Dense_0"])
    out = {"kernel": jnp.zeros_like(out["kernel"]), "bias": jnp.full_like(out["bias"], bias)}
    return {"params": {**params["params"], "Dense_0": out}}


def identity_critic(params):
    """``params`` (``[n, ...]``, one per twin) set so that every critic is ``Q(s, a) = a``:
    ``relu(a + 100) - 100`` through the first hidden unit."""
    p = params["params"]
    k = jnp.zeros_like(p["MLP_0"]["Dense_0"]["kernel"]).at[:, OBS, 0].set(1.0)
    b = jnp.zeros_like(p["MLP_0"]["Dense_0"]["bias"]).at[:, 0].set(100.0)
    k_out = jnp.zeros_like(p["Dense_0"]["kernel"]).at[:, 0, 0].set(1.0)
    b_out = jnp.full_like(p["Dense_0"]["bias"], -100.0)
    return {
        "params": {
            "MLP_0": {"Dense_0": {"kernel": k, "bias": b}},
            "Dense_0": {"kernel": k_out, "bias": b_out},
        }
    }


@pytest.mark.parametrize("bias", [-50.0, -0.5, 0.0, 0.7, 50.0])
def test_the_actor_maps_tanh_onto_the_action_bounds(bias):
    actor = Actor((2,), 1, LOW, HIGH)
    params = actor_with_output_bias(actor.init(jax.random.key(0), jnp.zeros(OBS)), bias)
    a = actor.apply(params, jnp.ones((2, OBS)))
    expected = LOW + (np.tanh(bias) + 1.0) / 2.0 * (HIGH - LOW)  # -1 -> low, 1 -> high
    np.testing.assert_allclose(a, np.full((2, 1), expected), rtol=1e-6, atol=1e-6)


def centred_agent(config):
    """A one-dimensional agent whose actor and target actor both act at the midpoint 2."""
    agent = make_ddpg(config, (OBS,), 1, LOW, HIGH)
    state = agent.init(jax.random.key(0))
    mid = actor_with_output_bias(state.actor, 0.0)
    return agent, state._replace(actor=mid, target_actor=mid)


@pytest.mark.parametrize("scale", [0.1, 0.3])
def test_exploration_noise_is_scaled_to_the_half_action_range(scale):
    agent, state = centred_agent(DDPGConfig(hidden=(2,), exploration_noise=scale))
    obs = jnp.zeros((40_000, OBS))
    greedy = agent.act(state, obs, jax.random.key(1), 0, explore=False)
    np.testing.assert_allclose(greedy, 2.0, rtol=1e-6)
    noise = np.asarray(agent.act(state, obs, jax.random.key(2), 0)) - 2.0
    assert abs(noise.mean()) < 0.01
    np.testing.assert_allclose(noise.std(), scale * (HIGH - LOW) / 2, rtol=0.03)


def test_exploration_keeps_the_action_within_its_bounds():
    agent, state = centred_agent(DDPGConfig(hidden=(2,), exploration_noise=3.0))
    a = np.asarray(agent.act(state, jnp.zeros((4_000, OBS)), jax.random.key(2), 0))
    assert a.min() == LOW and a.max() == HIGH  # clipped, not wrapped or rescaled
    inside = np.mean((a > LOW) & (a < HIGH))
    np.testing.assert_allclose(inside, 0.261, atol=0.03)  # P(|N(0, 6)| < 2): the rest clip


def smoothed_target_actions(config, b=4_096):
    """The next actions a TD3 / DDPG update bootstraps from, read back from its priorities.

    With both critics ``Q(s, a) = a``, reward 0, discount 1 and stored action -50, a row's TD
    error is ``a' + 50`` (> 0), so its priority is ``a' + 50 + eps``; the target actor acts 2.
    """
    agent, state = centred_agent(config)
    state = state._replace(
        critic=identity_critic(state.critic), target_critic=identity_critic(state.target_critic)
    )
    batch = {
        "obs": jnp.zeros((b, OBS)),
        "action": jnp.full((b, 1), -OFFSET),
        "reward": jnp.zeros(b),
        "discount": jnp.ones(b),
        "next_obs": jnp.zeros((b, OBS)),
    }
    _, prio, _ = agent.update(state, batch, jnp.ones(b), jax.random.key(3))
    return np.asarray(prio, np.float64) - config.priority_eps - OFFSET


def test_ddpg_bootstraps_the_target_actors_action_unperturbed():
    a = smoothed_target_actions(DDPGConfig(hidden=(2,), target_noise=0.5))
    np.testing.assert_allclose(a, 2.0, atol=1e-4)


def test_td3_target_noise_is_scaled_to_the_half_action_range():
    cfg = DDPGConfig(hidden=(2,), td3=True, target_noise=0.1, target_noise_clip=10.0)
    noise = smoothed_target_actions(cfg) - 2.0
    assert abs(noise.mean()) < 0.02
    np.testing.assert_allclose(noise.std(), 0.1 * (HIGH - LOW) / 2, rtol=0.05)


def test_td3_target_noise_is_clipped_to_its_scaled_clip():
    # std 20, clip 0.25 of the half range: nearly every draw is clipped to +-0.5
    cfg = DDPGConfig(hidden=(2,), td3=True, target_noise=10.0, target_noise_clip=0.25)
    noise = smoothed_target_actions(cfg) - 2.0
    assert np.abs(noise).max() <= 0.5 + 1e-4
    np.testing.assert_allclose(np.mean(np.isclose(np.abs(noise), 0.5, atol=1e-4)), 0.98, atol=0.02)
    assert (noise > 0).any() and (noise < 0).any()


def test_td3_smoothed_target_action_is_clipped_to_the_bounds():
    cfg = DDPGConfig(hidden=(2,), td3=True, target_noise=10.0, target_noise_clip=10.0)
    a = smoothed_target_actions(cfg)
    assert a.min() >= LOW - 1e-4 and a.max() <= HIGH + 1e-4
    np.testing.assert_allclose(np.mean(np.isclose(a, LOW, atol=1e-4)), 0.46, atol=0.03)
    np.testing.assert_allclose(np.mean(np.isclose(a, HIGH, atol=1e-4)), 0.46, atol=0.03)


def test_the_critic_loss_is_the_importance_weighted_squared_td_error():
    agent = make_ddpg(DDPGConfig(hidden=(8,)), (OBS,), 1, -2.0, 2.0)
    state = agent.init(jax.random.key(0))
    rng = np.random.default_rng(0)
    batch = {
        "obs": jnp.asarray(rng.normal(size=(6, OBS)), jnp.float32),
        "action": jnp.asarray(rng.uniform(-2, 2, (6, 1)), jnp.float32),
        "reward": jnp.asarray(rng.normal(size=6), jnp.float32),
        "discount": jnp.asarray([0.99, 0.0, 0.99**3, 0.99, 0.0, 0.5], jnp.float32),
        "next_obs": jnp.asarray(rng.normal(size=(6, OBS)), jnp.float32),
    }
    w = jnp.asarray([1.0, 0.2, 0.5, 0.0, 0.9, 0.3])
    _, _, metrics = agent.update(state, batch, w, jax.random.key(1))
    one = jax.tree.map(lambda x: x[0], state.critic)
    one_target = jax.tree.map(lambda x: x[0], state.target_critic)
    a_t = Actor((8,), 1, -2.0, 2.0).apply(state.target_actor, batch["next_obs"])
    y = batch["reward"] + batch["discount"] * Critic((8,)).apply(one_target, batch["next_obs"], a_t)
    td = y - Critic((8,)).apply(one, batch["obs"], batch["action"])
    np.testing.assert_allclose(
        metrics["loss"], np.mean(np.asarray(w) * np.asarray(td) ** 2), rtol=1e-5
    )


def leaves_equal(a, b):
    return all(
        bool(jnp.all(x == y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def leaves_close(a, b):
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return all(np.allclose(x, y, rtol=1e-5, atol=1e-7) for x, y in pairs)


def polyak(tau, new, old):
    return jax.tree.map(lambda n, o: tau * n + (1 - tau) * o, new, old)


@pytest.mark.parametrize("td3", [False, True])
def test_targets_follow_by_polyak_averaging_delayed_with_the_actor_for_td3(td3):
    """TD3 (Fujimoto et al. 2018, Algorithm 1): the actor and both targets move every
    ``policy_delay``-th critic step; DDPG moves all of them every step."""
    cfg = DDPGConfig(hidden=(4,), td3=td3, policy_delay=3, tau=0.2)
    agent = make_ddpg(cfg, (OBS,), 1, -1.0, 1.0)
    state = agent.init(jax.random.key(0))
    rng = np.random.default_rng(1)
    for step in range(1, 7):
        batch = {
            "obs": jnp.asarray(rng.normal(size=(4, OBS)), jnp.float32),
            "action": jnp.asarray(rng.uniform(-1, 1, (4, 1)), jnp.float32),
            "reward": jnp.asarray(rng.normal(size=4), jnp.float32),
            "discount": jnp.full((4,), 0.9),
            "next_obs": jnp.asarray(rng.normal(size=(4, OBS)), jnp.float32),
        }
        new, _, _ = agent.update(state, batch, jnp.ones(4), jax.random.key(step))
        assert not leaves_equal(new.critic, state.critic)  # the critic learns every step
        if td3 and step % 3:
            assert leaves_equal(new.actor, state.actor)
            assert leaves_equal(new.actor_opt, state.actor_opt)  # Adam's count held too
            assert leaves_equal(new.target_actor, state.target_actor)
            assert leaves_equal(new.target_critic, state.target_critic)
        else:
            assert not leaves_equal(new.actor, state.actor)
            assert leaves_close(new.target_actor, polyak(0.2, new.actor, state.target_actor))
            assert leaves_close(new.target_critic, polyak(0.2, new.critic, state.target_critic))
        state = new
    count = state.actor_opt[0].count
    assert int(count) == (2 if td3 else 6)  # actor steps taken

"""The fused training program: where its randomness comes from, and that it copies no tree."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from drlhet.agents.dqn import DQNConfig
from drlhet.runtime import trainer as trainer_module
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import default_mapping
from drlhet.runtime.trainer import make_trainer

SMALL = TrainConfig(
    env="CartPole-v1",
    steps=200 + 2 * 40,
    warmup=200,
    eval_every=40,
    eval_envs=2,
    batch_size=16,
    buffer_size=512,
    sgd_steps=2,
    dqn=DQNConfig(hidden=(8,)),
)


@pytest.fixture
def keys_seen(monkeypatch):
    """Records the key data every call of ``act``, ``env.step`` and ``update`` receives."""
    seen: dict[str, list[bytes]] = {"act": [], "env": [], "update": []}

    def record(kind, key):
        def store(data):
            seen[kind].append(np.asarray(data).tobytes())

        jax.debug.callback(store, jax.random.key_data(key))

    real_env, real_dqn = trainer_module.make_env, trainer_module.make_dqn

    def make_env(name, n, seeds=1):
        env = real_env(name, n, seeds)

        def step(state, action, key):
            record("env", key)
            return env.step(state, action, key)

        return env._replace(step=step)

    def make_dqn(*args):
        agent = real_dqn(*args)

        def act(state, obs, key, steps, explore=True):
            record("act", key)
            return agent.act(state, obs, key, steps, explore)

        def update(state, batch, weights, key):
            record("update", key)
            return agent.update(state, batch, weights, key)

        return agent._replace(act=act, update=update)

    monkeypatch.setattr(trainer_module, "make_env", make_env)
    monkeypatch.setattr(trainer_module, "make_dqn", make_dqn)
    return seen


def test_actor_and_env_randomness_are_independent(keys_seen):
    tr = make_trainer(SMALL)
    state = jax.jit(tr.warmup)(jax.jit(tr.init)(jax.random.key(0)))
    keys_seen["env"].clear()
    jax.block_until_ready(jax.jit(tr.chunk)(state))  # training iterations, then an evaluation
    acts, envs = keys_seen["act"], keys_seen["env"]
    assert len(acts) == len(envs) > tr.iterations  # the evaluation's steps are in there too
    assert not set(acts) & set(envs)  # no key is given to both the actor and the env


def test_every_learner_step_gets_its_own_key(keys_seen):
    tr = make_trainer(SMALL)
    state = jax.jit(tr.warmup)(jax.jit(tr.init)(jax.random.key(0)))
    jax.block_until_ready(jax.jit(tr.chunk)(state))
    updates = keys_seen["update"]
    assert len(updates) == tr.iterations * SMALL.sgd_steps
    assert len(set(updates)) == len(updates)


def test_the_default_replay_backend_is_resolved():
    assert make_trainer(SMALL).config.backend == "native"  # the fastest that loads here
    assert make_trainer(SMALL, platform="cpu").config.backend == "native"
    # the fastest that holds the tree: native's kernels take K <= 256
    wide = dataclasses.replace(SMALL, branching=300)
    assert make_trainer(wide).config.backend == "jax"
    assert default_mapping(wide).replay.backend == "jax"
    assert default_mapping(dataclasses.replace(wide, uniform=True)).replay.backend == "native"


def test_compiled_training_iterations_do_not_copy_the_tree():
    cfg = TrainConfig(
        env="CartPole-v1",
        num_envs=4,
        batch_size=64,
        buffer_size=2**15,
        warmup=256,
        eval_every=64,
        dqn=DQNConfig(hidden=(16,)),
    )
    tr = make_trainer(cfg)
    state = jax.jit(tr.warmup)(jax.jit(tr.init)(jax.random.key(0)))
    text = jax.jit(tr.iterate, donate_argnums=0).lower(state).compile().as_text()
    size = state.replay.tree.nodes.shape[0]
    assert not [line for line in text.splitlines() if " copy(" in line and f"[{size}]" in line]

"""What the performance model is given: the shapes traced from the networks, and a measured
mapping's run."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("td3", [False, True])
def test_the_traced_shapes_count_every_networks_weights(monkeypatch, td3):
    # the critics are made with vmap (a leading [critics] axis on every leaf): their weight
    # matrices were skipped and their biases counted as layers (DDPG 4481 MACs, not 8768)
    import dataclasses

    from drlhet.dse import trace
    from drlhet.dse.key import ProfileKey

    real = trace.make_trainer

    def make_trainer(cfg):  # ProfileKey has no TD3 switch: trace the TD3 agent here
        return real(dataclasses.replace(cfg, ddpg=dataclasses.replace(cfg.ddpg, td3=td3)))

    monkeypatch.setattr(trace, "make_trainer", make_trainer)
    shapes = trace.shapes_of(ProfileKey(algo="ddpg", env="Pendulum-v1", hidden=(64, 64)))
    actor = 3 * 64 + 64 * 64 + 64 * 1  # Pendulum: 3 observations, 1 action
    critic = (3 + 1) * 64 + 64 * 64 + 64 * 1
    assert shapes.macs_per_sample == actor + (2 if td3 else 1) * critic
    assert shapes.layers == 6  # 3 of the actor, 3 batched products of the critics
    dqn = trace.shapes_of(ProfileKey(hidden=(64, 64)))  # CartPole: 4 observations, 2 actions
    assert dqn.macs_per_sample == 4 * 64 + 64 * 64 + 64 * 2 + 64  # and the dueling value head


@pytest.mark.parametrize("num_envs", [3, 32, 64])
def test_a_measured_mapping_runs_whole_iterations_per_chunk(monkeypatch, num_envs):
    # eval_every was the raw 2,000 env steps, refused for envs that do not divide it
    from drlhet.dse import measure
    from drlhet.dse.key import ProfileKey
    from drlhet.runtime.config import check, chunks_of

    seen = []

    def run(cfg, mapping):
        check(cfg)
        chunks_of(cfg)
        seen.append(cfg)
        return None, [{"trained_samples_per_s": 1.0, "env_steps_per_s": 2.0}] * 5

    monkeypatch.setattr(measure, "run", run)
    got = measure.measure_mapping(
        ProfileKey(num_envs=num_envs), "actors=cpu:0,replay=cpu:0,learner=cpu:0"
    )
    assert got["trained_samples_per_s"] == 1.0
    assert seen[0].eval_every % num_envs == 0 and seen[0].eval_every <= 2_000

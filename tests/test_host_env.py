"""Host environments (`drlhet.envs.host`): gymnasium ids stepped outside XLA, as gymnax's are."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

gym = pytest.importorskip("gymnasium", reason="missing library: gymnasium")

from drlhet.agents.ddpg import DDPGConfig  # noqa: E402
from drlhet.agents.dqn import DQNConfig  # noqa: E402
from drlhet.envs import make_env  # noqa: E402
from drlhet.envs.host import HostPool  # noqa: E402
from drlhet.runtime.config import TrainConfig  # noqa: E402
from drlhet.runtime.run import Start, run  # noqa: E402

spaces = gym.spaces


class Counter(gym.Env):
    """obs = [steps, last action]; reward = steps; terminates when action 1 is taken at step
    >= 3; the registration's time limit (5) truncates."""

    def __init__(self, action_space=None, observation_space=None):
        self.action_space = action_space or spaces.Discrete(2)
        self.observation_space = observation_space or spaces.Box(-9.0, 9.0, (2,), np.float32)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = int(self.np_random.integers(0, 2))  # 0 or 1: shows the seeding
        return np.array([self.t, 0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        a = float(np.asarray(action).reshape(-1)[0])
        obs = np.array([self.t, a], np.float32)
        return obs, float(self.t), bool(a == 1 and self.t >= 3), False, {}


def _register(name: str, **kwargs) -> str:
    gym.register(id=name, entry_point=lambda: Counter(**kwargs), max_episode_steps=5)
    return f"gymnasium:{name}"


COUNTER = _register("DrlhetCounter-v0")


def test_termination_and_truncation_are_kept_apart_and_finished_envs_reset():
    env = make_env(COUNTER, 1)
    obs, state = jax.jit(env.reset)(jax.random.key(0))
    start = int(obs[0, 0])
    step = jax.jit(env.step)
    seen = []
    for _ in range(5 - start):  # action 0: never terminates, so the time limit (5) cuts it
        state, st = step(state, jnp.zeros((1,), jnp.int32), jax.random.key(1))
        seen.append(st)
    last = seen[-1]
    assert not bool(last.terminated[0]) and bool(last.truncated[0])
    assert float(last.next_obs[0, 0]) == 5.0  # the true final observation
    assert float(last.obs[0, 0]) in (0.0, 1.0)  # the next episode's first
    assert [bool(s.truncated[0]) for s in seen[:-1]] == [False] * (len(seen) - 1)
    # action 1 at step >= 3 terminates: no bootstrap, however the time limit stands
    t = int(last.obs[0, 0])
    for _ in range(3 - t):
        state, st = step(state, jnp.ones((1,), jnp.int32), jax.random.key(1))
    assert bool(st.terminated[0]) and not bool(st.truncated[0])
    assert float(st.reward[0]) == 3.0 and float(st.next_obs[0, 1]) == 1.0


def test_seeds_vmap_into_one_call_and_the_same_key_gives_the_same_episodes():
    env = make_env("gymnasium:CartPole-v1", 4)
    reset = jax.jit(jax.vmap(env.reset))
    keys = jax.random.split(jax.random.key(3), 3)
    obs, state = reset(keys)
    assert obs.shape == (3, 4, 4) and state.shape == (3, 4)
    assert len({tuple(np.asarray(o[0])) for o in obs}) == 3  # seeds differ
    again, _ = reset(keys)
    np.testing.assert_array_equal(np.asarray(obs), np.asarray(again))

    def roll(state, key):
        def body(state, k):
            a = jax.random.randint(k, (3, 4), 0, 2)
            state, st = jax.vmap(env.step)(state, a, jax.random.split(k, 3))
            return state, st.reward

        return jax.lax.scan(body, state, jax.random.split(key, 50))

    state, rewards = jax.jit(roll)(state, jax.random.key(4))
    assert rewards.shape == (50, 3, 4) and float(rewards.sum()) == 600.0  # reward 1 a step
    np.testing.assert_array_equal(np.asarray(state), 50)


def test_box_actions_with_uneven_bounds_are_rescaled_from_minus_one_one():
    low, high = np.array([0.0, -4.0], np.float32), np.array([2.0, 4.0], np.float32)
    name = _register("DrlhetBox-v0", action_space=spaces.Box(low, high))
    env = make_env(name, 1)
    assert not env.discrete and env.action_dim == 2
    assert (env.action_low, env.action_high) == (-1.0, 1.0)
    _, state = env.reset(jax.random.key(0))
    pool_action = []
    for a, want in ((-1.0, 0.0), (1.0, 2.0), (0.0, 1.0), (7.0, 2.0)):  # out of range: clipped
        state, st = env.step(state, jnp.full((1, 2), a), jax.random.key(0))
        pool_action.append(float(st.next_obs[0, 1]))
        assert pool_action[-1] == want


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(observation_space=spaces.Discrete(4)), "observation space Discrete"),
        (dict(action_space=spaces.MultiDiscrete([2, 2])), "action space MultiDiscrete"),
        (dict(action_space=spaces.Discrete(3, start=1)), "must start at 0"),
        (dict(action_space=spaces.Box(-np.inf, np.inf, (2,))), "finite bounds"),
    ],
)
def test_unsupported_spaces_are_named(kwargs, match):
    name = _register(f"DrlhetBad{abs(hash(match)) % 10_000}-v0", **kwargs)
    with pytest.raises(ValueError, match=match):
        make_env(name, 1)


def test_unknown_ids_are_clear_errors():
    with pytest.raises(ValueError, match="unknown environment 'gymnasium:NoSuchEnv-v0'"):
        make_env("gymnasium:NoSuchEnv-v0", 1)


def test_a_pool_stepped_before_reset_starts_cut_episodes():
    # what a resumed run meets: the simulator state is not in the checkpoint
    pool = HostPool("CartPole-v1", 2, np.zeros(()), np.zeros(()), False)
    obs, nxt, reward, term, trunc = pool.step(np.zeros((1, 2)), np.zeros((1, 2), np.int64))
    assert obs.shape == (1, 2, 4) and np.all(trunc) and not np.any(term)
    assert np.all(reward == 0) and np.array_equal(obs, nxt)
    pool.close()


SMALL = TrainConfig(
    env="gymnasium:CartPole-v1",
    steps=300 + 2 * 100,
    warmup=300,
    eval_every=100,
    eval_envs=2,
    seeds=2,
    sgd_steps=2,
    batch_size=32,
    buffer_size=2048,
    dqn=DQNConfig(hidden=(16,)),
)


def test_a_split_mapping_trains_host_envs_as_the_fused_loop_does():
    # delay 0: every path computes the same numbers (the host envs are seeded from the keys)
    fused_state, fused_rows = run(SMALL, "actors=cpu:0,replay=jax@cpu:0,learner=cpu:0")
    split_state, split_rows = run(SMALL, "actors=cpu:0,replay=jax@cpu:1,learner=cpu:1")
    assert [r["eval_return"] for r in fused_rows] == [r["eval_return"] for r in split_rows]
    for field in ("replay", "agent", "obs", "env_state"):
        a, b = (
            jax.tree.leaves(getattr(fused_state, field)),
            jax.tree.leaves(getattr(split_state, field)),
        )
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=field)


def test_a_resumed_run_starts_fresh_episodes_and_inserts_no_step_never_taken():
    # a run resumed after chunk 1 (a fresh pool: a new process's) from its state, in host
    # arrays as a checkpoint gives them. Every CartPole step rewards 1: a transition whose
    # reward is 0 is of an action never taken (the pool's cut step, inserted once per env)
    first, _ = run(SMALL)
    longer = dataclasses.replace(SMALL, steps=SMALL.steps + SMALL.eval_every)
    before = int(first.replay.size[0])
    states, rows = run(longer, start=Start(jax.device_get(first), 1))
    assert [r["chunk"] for r in rows] == [2]
    size = np.asarray(states.replay.size)
    assert np.all(size == before + SMALL.eval_every)  # (the buffer is not full)
    rewards = np.asarray(states.replay.storage["reward"])[:, : before + SMALL.eval_every]
    assert np.all(rewards >= 1.0), np.argwhere(rewards < 1.0)


def test_ddpg_trains_a_continuous_host_env_with_delay():
    cfg = TrainConfig(
        algo="ddpg",
        env="gymnasium:Pendulum-v1",
        steps=256 + 2 * 64,
        warmup=256,
        eval_every=64,
        eval_envs=1,
        num_envs=2,
        sgd_steps=1,
        batch_size=32,
        buffer_size=1024,
        delay=2,
        ddpg=DDPGConfig(hidden=(16,), td3=True),
    )
    state, rows = run(cfg)
    assert len(rows) == 2 and all(np.isfinite(r["eval_return"]) for r in rows)
    assert int(np.asarray(state.env_steps)[0]) == 256 + 128


def test_cli_names_a_bad_host_env_in_one_line():
    got = subprocess.run(
        [sys.executable, "-m", "drlhet", "train", "--env", "gymnasium:FrozenLake-v1"],
        capture_output=True,
        text=True,
    )
    assert got.returncode == 2
    assert got.stderr.strip().splitlines() == [
        "drlhet: error: --env: gymnasium:FrozenLake-v1: observation space Discrete(16) is not "
        "supported (drlhet needs a Box; flatten or one-hot it with a gymnasium wrapper)"
    ]

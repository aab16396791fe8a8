"""The n-step accumulator against a direct computation over hand-made episodes."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from drlhet.replay.nstep import cut, make_nstep

GAMMA = 0.9
EXAMPLE = {
    "obs": jnp.zeros(1),
    "action": jnp.int32(0),
    "reward": jnp.float32(0),
    "discount": jnp.float32(0),
    "next_obs": jnp.zeros(1),
}


def run(n, rewards, terminated, truncated, cuts=()):
    """Pushes T steps of one env (obs t = t, next_obs = t + 0.5), the FIFO `cut` after each
    step in ``cuts``; returns each transition."""
    fns = make_nstep(n, GAMMA)
    fifo = fns.init(EXAMPLE, 1)
    out = []
    for t, (r, te, tr) in enumerate(zip(rewards, terminated, truncated, strict=True)):
        fifo = fns.push(
            fifo,
            jnp.full((1, 1), t, jnp.float32),
            jnp.asarray([t], jnp.int32),
            jnp.asarray([r], jnp.float32),
            jnp.full((1, 1), t + 0.5, jnp.float32),
            jnp.asarray([te]),
            jnp.asarray([tr]),
        )
        if t in cuts:
            fifo = cut(fifo)
        if t >= n - 1:
            out.append({k: np.asarray(v)[0] for k, v in fns.transition(fifo).items()})
    return out


def expected(n, rewards, terminated, truncated, t):
    """The n-step transition starting at step t, computed directly."""
    ret, m = 0.0, 0
    for i in range(n):
        ret += GAMMA**i * rewards[t + i]
        m = i + 1
        if terminated[t + i] or truncated[t + i]:
            break
    end = t + m - 1
    return {
        "obs": t,
        "action": t,
        "reward": ret,
        "discount": 0.0 if terminated[end] else GAMMA**m,
        "next_obs": end + 0.5,
    }


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_matches_the_direct_computation_across_episode_ends(n):
    rng = np.random.default_rng(n)
    steps = 30
    rewards = rng.random(steps).round(2).tolist()
    terminated = [t in (4, 5, 17) for t in range(steps)]  # 5: a one-step episode
    truncated = [t in (11, 23) for t in range(steps)]
    got = run(n, rewards, terminated, truncated)
    for t, g in enumerate(got):
        want = expected(n, rewards, terminated, truncated, t)
        assert float(g["obs"][0]) == want["obs"] and int(g["action"]) == want["action"]
        np.testing.assert_allclose(g["reward"], want["reward"], rtol=1e-6)
        np.testing.assert_allclose(g["discount"], want["discount"], rtol=1e-6)
        assert float(g["next_obs"][0]) == want["next_obs"], (t, g, want)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_a_cut_ends_the_episodes_in_the_fifo_as_a_truncation_there(n):
    # a resumed run on host environments cuts its episodes after the last step it took: the
    # windows still in the FIFO end there and bootstrap from that step's next_obs, as if the
    # environment had truncated it; a step that ended its episode already is unchanged
    rng = np.random.default_rng(n)
    steps = 30
    rewards = rng.random(steps).round(2).tolist()
    terminated = [t in (4, 17) for t in range(steps)]
    truncated = [t == 11 for t in range(steps)]
    cuts = (8, 11, 17, 20)
    got = run(n, rewards, terminated, truncated, cuts)
    as_truncated = [
        tr or (t in cuts and not te)
        for t, (te, tr) in enumerate(zip(terminated, truncated, strict=True))
    ]
    for t, g in enumerate(got):
        want = expected(n, rewards, terminated, as_truncated, t)
        np.testing.assert_allclose(g["reward"], want["reward"], rtol=1e-6)
        np.testing.assert_allclose(g["discount"], want["discount"], rtol=1e-6)
        assert float(g["next_obs"][0]) == want["next_obs"], (t, g, want)


def test_truncation_bootstraps_and_termination_does_not():
    (one,) = run(1, [1.0], [False], [True])
    assert one["discount"] == pytest.approx(GAMMA)
    (one,) = run(1, [1.0], [True], [False])
    assert one["discount"] == 0.0


@pytest.mark.parametrize("n, gamma", [(0, 0.9), (2, 1.5), (2.5, 0.9)])
def test_bad_configuration(n, gamma):
    with pytest.raises(ValueError):
        make_nstep(n, gamma)

"""Host environments that misbehave (`drlhet.envs.host`): each failure is one line naming the
environment and what it did, from `make_env`, `drlhet.runtime.run.run` and ``drlhet train``."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

gym = pytest.importorskip("gymnasium", reason="missing library: gymnasium")

from drlhet.agents.dqn import DQNConfig  # noqa: E402
from drlhet.cli import main  # noqa: E402
from drlhet.envs import make_env  # noqa: E402
from drlhet.envs.host import HostEnvError, failure_in  # noqa: E402
from drlhet.runtime.config import TrainConfig  # noqa: E402
from drlhet.runtime.run import run  # noqa: E402

spaces = gym.spaces
AFTER = 3
"""Steps a misbehaving environment takes as it should before it misbehaves."""


class Faulty(gym.Env):
    """obs = [t] * 4, reward 1, never ends; from step `AFTER` on it does what ``fault`` says."""

    def __init__(self, fault: str, action_space=None):
        if fault == "make":
            raise RuntimeError("cannot open the simulator\nsecond line")
        self.fault, self.t = fault, 0
        self.action_space = action_space or spaces.Discrete(2)
        self.observation_space = spaces.Box(-9.0, 9.0, (4,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        if self.fault == "reset":
            raise RuntimeError("reset blew up")
        if self.fault == "reset-shape":
            return np.zeros(3, np.float32), {}
        if self.fault == "reset-old-api":
            return np.zeros(4, np.float32)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.t += 1
        obs, reward, term = np.full(4, self.t, np.float32), 1.0, False
        if self.t < AFTER:
            return obs, reward, term, False, {}
        fault = self.fault
        if fault == "step":
            raise RuntimeError("step blew up")
        obs = {
            "shape": np.zeros(3, np.float32),
            "dtype": np.array(list("abcd")),
            "nan-obs": np.array([0, np.nan, 0, 0]),
            "inf-obs": np.array([0, 0, -np.inf, 0]),
            "big-obs": np.array([0, 0, 0, 1e300]),
        }.get(fault, obs)
        reward = {"nan-reward": np.nan, "inf-reward": np.inf, "str-reward": "high"}.get(
            fault, reward
        )
        reward = {"none-reward": None, "array-reward": np.array([1.0, 2.0])}.get(fault, reward)
        term = np.array([True, False]) if fault == "array-term" else term
        return obs, reward, term, False, {}


def _register(fault: str, **kwargs) -> str:
    name = f"DrlhetFaulty-{fault}-v0"
    if name not in gym.registry:  # once: registering again warns (on stderr, from the CLI)
        gym.register(id=name, entry_point=lambda: Faulty(fault, **kwargs), max_episode_steps=50)
    return f"gymnasium:{name}"


STEP_FAULTS = {
    "step": "step raised RuntimeError: step blew up",
    "shape": "step returned an observation of shape (3,), expected (4,)",
    "dtype": "step returned an observation of dtype <U1, expected numbers",
    "nan-obs": "step returned an observation holding nan (at 1)",
    "inf-obs": "step returned an observation holding -inf (at 2)",
    "big-obs": "step returned an observation holding 1e+300 (at 3)",  # inf as float32
    "nan-reward": "step returned a reward of nan",
    "inf-reward": "step returned a reward of inf",
    "str-reward": "step returned a reward 'high' (str), expected one number",
    "none-reward": "step returned a reward None (NoneType), expected one number",
    "array-reward": "step returned a reward array([1., 2.]) (ndarray), expected one number",
    "array-term": "step returned terminated=array([ True, False]), expected a bool",
}
RESET_FAULTS = {
    "reset": "reset raised RuntimeError: reset blew up",
    "reset-shape": "reset returned an observation of shape (3,), expected (4,)",
    "reset-old-api": "reset returned a ndarray, expected (observation, info)",
}


def _raised(fn) -> str:
    """The one-line message of the `HostEnvError` behind what ``fn()`` raises."""
    with pytest.raises(Exception) as info:
        jax.block_until_ready(fn())
    found = failure_in(info.value)
    assert found is not None, info.value
    assert isinstance(found, HostEnvError) and "\n" not in str(found)
    return str(found)


@pytest.mark.parametrize("fault", sorted(STEP_FAULTS))
def test_a_bad_step_is_named_in_one_line(fault, caplog):
    name = _register(fault)
    env = make_env(name, 2)
    step = jax.jit(env.step)
    obs, state = jax.jit(env.reset)(jax.random.key(0))
    for _ in range(AFTER - 1):  # it behaves until then
        state, st = step(state, jnp.zeros((2,), jnp.int32), jax.random.key(0))
    assert np.all(np.isfinite(np.asarray(st.next_obs)))
    with caplog.at_level(logging.ERROR):
        said = _raised(lambda: step(state, jnp.zeros((2,), jnp.int32), jax.random.key(0)))
    assert said == f"{name}: {STEP_FAULTS[fault]}"
    assert not caplog.records  # no traceback logged by JAX's callback machinery


@pytest.mark.parametrize("fault", sorted(RESET_FAULTS))
def test_a_bad_reset_is_named_in_one_line(fault):
    name = _register(fault)
    env = make_env(name, 1)
    said = _raised(lambda: jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(0), 2)))
    assert said == f"{name}: {RESET_FAULTS[fault]}"


def test_a_constructor_that_raises_is_named_with_the_id():
    name = _register("make")
    with pytest.raises(HostEnvError) as info:
        make_env(name, 1)
    assert str(info.value) == f"{name}: gym.make raised RuntimeError: cannot open the simulator"
    with pytest.raises(ValueError, match="gymnasium:no_such_module:X-v0: gym.make raised Module"):
        make_env("gymnasium:no_such_module:X-v0", 1)


@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(np.float32([0.0, -4.0]), np.float32([2.0, 4.0])),  # rescaled
        spaces.Box(-0.1, 0.1, (2,), np.float32),  # same bounds: clipped
        spaces.Box(-0.3, 0.7, (2,), np.float64),
    ],
)
def test_every_action_sent_is_inside_the_action_space(space):
    # Faulty.step asserts space.contains(action): extreme agent actions are clipped into it
    env = make_env(_register(f"none-{space.dtype}-{space.high[0]}", action_space=space), 1)
    step = jax.jit(env.step)
    _, state = jax.jit(env.reset)(jax.random.key(0))
    for a in (-7.0, 7.0, env.action_low, env.action_high, 0.0):
        state, _ = step(state, jnp.full((1, 2), a, jnp.float32), jax.random.key(0))
    said = _raised(lambda: step(state, jnp.full((1, 2), jnp.nan), jax.random.key(0)))
    assert said.endswith("the agent's action [nan nan] is not finite")


def test_run_raises_an_error_naming_the_env_and_what_it_did():
    cfg = TrainConfig(
        env=_register("nan-reward"),
        steps=64,
        warmup=32,
        eval_every=32,
        eval_envs=1,
        batch_size=16,
        buffer_size=128,
        dqn=DQNConfig(hidden=(8,)),
    )
    said = _raised(lambda: run(cfg))
    assert said == f"{cfg.env}: step returned a reward of nan"


CLI_RUN = ["--warmup", "32", "--batch-size", "16", "--buffer-size", "128", "--steps", "64"]
CLI_RUN += ["--eval-every", "32", "--eval-envs", "1", "--dqn.hidden", "8", "--no-progress"]


def _train(env: str, tmp_path, capsys) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as info:
        main(["train", "--env", env, *CLI_RUN, "--out", str(tmp_path / "runs"), "--name", "r"])
    return info.value.code, capsys.readouterr().err.strip().splitlines()


def test_cli_a_constructor_that_raises_is_one_line_exit_1(tmp_path, capsys):
    name = _register("make")
    code, err = _train(name, tmp_path, capsys)
    assert code == 1
    assert err == [
        f"drlhet: failed: HostEnvError: {name}: gym.make raised RuntimeError: cannot open the "
        "simulator"
    ]


def test_cli_a_step_that_raises_fails_with_exit_1_and_no_traceback(tmp_path):
    # in a process of its own: in pytest's, JAX's log of a failed callback goes to caplog
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import test_host_env_failures as t; "
        "from drlhet.cli import main; main(['train', '--env', t._register('step'), *t.CLI_RUN, "
        "'--out', sys.argv[2]])"
    )
    where = [str(Path(__file__).parent), str(tmp_path / "runs")]
    got = subprocess.run([sys.executable, "-c", script, *where], capture_output=True, text=True)
    err = got.stderr.strip().splitlines()
    assert got.returncode == 1 and len(err) == 1 and err[0].startswith("drlhet: failed: "), err
    assert not (tmp_path / "runs").exists()


def test_cli_a_step_that_raises_is_named_in_the_line(tmp_path, capsys):
    """The line was the first of XLA's error for the callback, not the environment's."""
    name = _register("step")
    _, err = _train(name, tmp_path, capsys)
    assert err == [f"drlhet: failed: HostEnvError: {name}: step raised RuntimeError: step blew up"]


def test_a_namespaced_id_gets_a_default_run_name_of_one_folder(tmp_path):
    # was refused: "--name must be one folder's name (no '/' ...)", a name the user never gave
    from drlhet.cli.train import _new_run_dir
    from drlhet.runtime.config import TrainConfig

    run = _new_run_dir(TrainConfig(env="gymnasium:ALE/Pong-v5"), tmp_path, None)
    assert run.parent == tmp_path and run.name.endswith("-dqn-gymnasium-ALE-Pong-v5")

"""How many host environments fit (`drlhet.envs.host_room`): from `MEASURE_FROM` on, what one
costs is measured on a few and a count past this machine's available memory is refused in one
line before the rest are made: as the configuration is checked (every seed's environments),
and by the pool (the seeds it is called with), which is then left empty and ready."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest

gym = pytest.importorskip("gymnasium", reason="missing library: gymnasium")

from cli_args import TINY_SHAPE, one_error_line  # noqa: E402

from drlhet.cli import main  # noqa: E402
from drlhet.envs import host_room, make_env  # noqa: E402
from drlhet.envs.host import HostEnvError, failure_in  # noqa: E402
from drlhet.envs.host_room import MEASURE_FROM, PROBES, room  # noqa: E402
from drlhet.runtime.config import ConfigError, TrainConfig  # noqa: E402
from drlhet.runtime.trainer import make_evaluation, make_trainer  # noqa: E402

CARTPOLE = "gymnasium:CartPole-v1"
MiB = 2**20


def grows(monkeypatch, each: int, have: int) -> None:
    """This process's resident memory grows by ``each`` bytes per environment made while it is
    measured (`PROBES` of them between two reads); ``have`` bytes are available."""
    reads = itertools.count()
    monkeypatch.setattr(host_room, "resident_memory", lambda: 2**30 + each * PROBES * next(reads))
    monkeypatch.setattr(host_room, "available_memory", lambda: (have, "MemAvailable"))


def test_a_count_past_the_available_memory_is_said_with_its_figures(monkeypatch):
    monkeypatch.setattr(host_room, "available_memory", lambda: (2**30, "MemAvailable"))
    assert room(100_000, 9, (MiB, 1e-3)) == (
        "100,000 environments (one Python simulator each, on the host) would need ~97.6 GiB "
        "more (1.0 MiB each and 1.0 ms to make, measured on 8), this machine has 1.0 GiB "
        "available (MemAvailable); ask for fewer environments (num_envs, eval_envs) or seeds"
    )
    assert room(1000, 9, (MiB, 1e-3)) == ""  # 991 MiB more: they fit
    monkeypatch.setattr(host_room, "available_memory", lambda: None)
    assert room(100_000, 9, (MiB, 1e-3)) == ""  # the machine does not say: not refused


def test_the_cost_of_one_is_measured_on_a_few_made(monkeypatch):
    grows(monkeypatch, 3 * MiB, 2**40)
    made: list = []
    each, seconds = host_room.cost_each(lambda: object(), made)
    assert len(made) == PROBES and each == 3 * MiB and seconds >= 0


@pytest.mark.parametrize(
    "field, cfg",
    [
        (
            "num_envs",
            TrainConfig(env=CARTPOLE, seeds=2, num_envs=150, eval_envs=2, eval_every=6000),
        ),
        ("eval_envs", TrainConfig(env=CARTPOLE, seeds=2, num_envs=2, eval_envs=150)),
        ("episodes", TrainConfig(env=CARTPOLE, seeds=2)),
    ],
)
def test_too_many_are_refused_as_the_configuration_is_checked(monkeypatch, field, cfg):
    """Every seed's: 2 seeds of 150 are 300; the trainer and the evaluation name the count
    that asked for them."""
    grows(monkeypatch, MiB, 64 * MiB)
    with pytest.raises(ValueError, match=f"^{CARTPOLE}: 300 environments .* ~300.0 MiB more"):
        make_env(CARTPOLE, 150, seeds=2)
    with pytest.raises(ConfigError, match=f"^{field}: {CARTPOLE}: 300 environments") as e:
        make_evaluation(cfg, 150) if field == "episodes" else make_trainer(cfg)
    assert e.value.fields == (field,)


def test_the_cli_refuses_them_in_one_line_naming_the_option(monkeypatch, tmp_path, capsys):
    grows(monkeypatch, MiB, 64 * MiB)
    run = [*TINY_SHAPE, "--env", CARTPOLE, "--eval-envs", "300", "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as stop:
        main(["train", *run, "--no-progress"])
    assert stop.value.code == 2 and list(tmp_path.iterdir()) == []
    assert one_error_line(capsys).startswith(
        f"drlhet: error: --eval-envs: {CARTPOLE}: 300 environments (one Python simulator each"
    )


def test_below_the_threshold_nothing_is_measured(monkeypatch):
    def measured(*args):
        raise AssertionError("measured")

    monkeypatch.setattr(host_room, "cost_each", measured)
    monkeypatch.setattr("drlhet.envs.host.cost_each", measured)
    env = make_env(CARTPOLE, MEASURE_FROM - 1)
    assert env.num_envs == MEASURE_FROM - 1


def test_the_pool_refuses_the_seeds_it_is_called_with_and_stays_ready(monkeypatch):
    """Made for one seed (fits), reset for 2 of 200 each: refused before the rest are made,
    in one line; with the memory there, the same call then makes them."""
    env = make_env(CARTPOLE, 200)  # one seed's 200: under the threshold, not measured
    reset = jax.jit(jax.vmap(env.reset))
    keys = jax.random.split(jax.random.key(0), 2)
    grows(monkeypatch, MiB, 64 * MiB)
    with pytest.raises(Exception) as info:
        jax.block_until_ready(reset(keys))
    found = failure_in(info.value)
    assert isinstance(found, HostEnvError) and "\n" not in str(found)
    assert str(found).startswith(f"{CARTPOLE}: 400 environments (one Python simulator each")
    assert "~391.0 MiB more (1.0 MiB each" in str(found)  # 400 less the 9 made to measure
    monkeypatch.setattr(host_room, "available_memory", lambda: (2**40, "MemAvailable"))
    obs, _ = reset(keys)
    assert np.asarray(obs).shape == (2, 200, 4) and np.all(np.isfinite(np.asarray(obs)))


def test_a_constructor_that_fails_while_they_are_measured_is_named(monkeypatch):
    """Its first make (the spaces' probe) succeeds, a later one, among those measured, raises:
    the line names the id and what it raised, as for a first make that raises."""
    made = itertools.count()

    def flaky():
        if next(made) >= 3:
            raise RuntimeError("out of licences")
        return gym.make("CartPole-v1")

    gym.register(id="Flaky-v0", entry_point=flaky, max_episode_steps=5)
    with pytest.raises(HostEnvError) as info:
        make_env("gymnasium:Flaky-v0", MEASURE_FROM)
    assert str(info.value) == "gymnasium:Flaky-v0: gym.make raised RuntimeError: out of licences"

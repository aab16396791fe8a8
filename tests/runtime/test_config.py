"""The run's configuration: its checks and how many chunks of training fit in its steps."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from drlhet.agents.ddpg import DDPGConfig
from drlhet.agents.dqn import DQNConfig
from drlhet.runtime.config import ConfigError, TrainConfig, check, chunks_of, warmup_steps

BASE = TrainConfig(steps=2_000, warmup=200, eval_every=400, batch_size=32, buffer_size=1_000)


@pytest.mark.parametrize(
    "steps, chunks",
    [(200 + 400, 1), (200 + 3 * 400, 3), (200 + 3 * 400 + 399, 3), (200 + 4 * 400, 4)],
)
def test_chunks_round_down_so_a_run_never_passes_its_steps(steps, chunks):
    cfg = dataclasses.replace(BASE, steps=steps)
    assert chunks_of(cfg) == chunks
    assert cfg.warmup + chunks_of(cfg) * cfg.eval_every <= steps


def test_steps_without_room_for_one_chunk_are_refused_naming_both():
    with pytest.raises(ConfigError) as e:
        chunks_of(dataclasses.replace(BASE, steps=599))
    assert "steps (599) must be >= warmup + eval_every (200 + 400)" in str(e.value)
    assert e.value.fields == ("steps", "warmup", "eval_every")


def test_warmup_steps_count_the_rounding_and_the_n_step_window():
    # 201 rounded up to 4 envs is 204, and DQN's 3-step returns first fill 2 x 4 env steps
    assert warmup_steps(dataclasses.replace(BASE, warmup=201)) == 204 + 8
    assert warmup_steps(dataclasses.replace(BASE, n_step=1)) == 200


@pytest.mark.parametrize(
    "change, message, fields",
    [
        (
            {"batch_size": 1_500, "warmup": 1_500},
            "batch_size (1500) must be <= buffer_size (1000)",
            2,
        ),
        ({"backend": "nope"}, "backend 'nope' is not registered", 1),
        ({"learner": "nope"}, "learner 'nope' is not registered (for training: fpga, jax)", 1),
        ({"learner": "native"}, "learner 'native' does not implement training (fpga, jax do)", 1),
        ({"branching": 1}, "branching must be >= 2, got 1", 1),
        # was taken: 10^8 traced for minutes into 14 GiB before anything was refused
        ({"branching": 1025}, "branching must be <= 1024 (a node's children are summed", 1),
        # was taken: --n-step 1000000 ran a warm-up 40 times --steps (and still filling)
        ({"n_step": 501}, "n_step (501) must be <= steps / num_envs (500), the iterations", 3),
        ({"buffer_size": 2**31 - 1}, "needs 2290649248 tree nodes", 2),
        # was taken: an OverflowError once the run's counters reached 2^31 (exit status 1)
        ({"steps": 2**31}, "steps must be <= 2147483647 (the program's counters are int32)", 1),
        # was taken: no delayed update ever applied (a delay of 10^6 ran at 12 env steps/s)
        ({"delay": 10**6}, "delay (1000000) must be below the run's learner steps (", 4),
        ({"backend": "fpga", "branching": 2}, "cannot hold buffer_size 1000 at branching 2", 3),
        ({"backend": "native", "branching": 300}, "the native backend supports K <= 256", 3),
        ({"backend": "cuda", "branching": 257}, "the cuda backend supports K <= 256", 3),
    ],
)
def test_bad_configurations_name_their_fields(change, message, fields):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        check(dataclasses.replace(BASE, **change))
    assert len(e.value.fields) == fields and isinstance(e.value, ValueError)


def test_uniform_replay_has_no_tree_to_check():
    # a tree of 2^31 - 1 leaves at K 2 would need more nodes than int32 reaches (refused above)
    check(dataclasses.replace(BASE, uniform=True, buffer_size=2**31 - 1, branching=2))


@pytest.mark.parametrize("backend", ["jax", "native", "fpga"])
def test_a_backend_named_for_uniform_replay_is_refused_it_has_no_tree(backend):
    """Was taken, and the run reported its replay backend, though uniform replay never calls a
    backend's tree operations."""
    with pytest.raises(ConfigError) as e:
        check(dataclasses.replace(BASE, uniform=True, backend=backend, branching=2))
    assert str(e.value) == (
        f"backend {backend!r} runs a sum tree, and uniform replay has none: drop backend"
    )
    assert e.value.fields == ("backend", "uniform")


def test_a_uniform_run_built_with_the_backend_its_mapping_placed_is_not_refused():
    """`drlhet.runtime.run` names the replay backend of every run (the mapping's placement),
    uniform ones too: only a backend the configuration names is refused."""
    from drlhet.runtime.trainer import make_trainer

    cfg = dataclasses.replace(BASE, env="probe-constant", uniform=True, backend="jax")
    assert make_trainer(cfg).config.backend == "jax"


@pytest.mark.parametrize(
    "backend, mapping, message",
    [
        ("native", None, "backend 'native' runs a sum tree, and uniform replay has none"),
        (None, "actors=cpu:0,replay=native@cpu:0,learner=cpu:0",
         "mapping replay=native@cpu:0 names a replay backend, and uniform replay has no tree "
         "for it: place the replay on cpu:0 alone"),
        (None, "actors=cpu:0,insert=jax@cpu:0,learner=cpu:0", "mapping insert=jax@cpu:0"),
    ],
)  # fmt: skip
def test_run_refuses_a_replay_backend_named_for_uniform_replay(backend, mapping, message):
    """Was accepted by the library (only the CLI refused it): `run` names its mapping's
    replay backend for every run, so the user's was dropped without a word."""
    from drlhet.runtime.run import run

    cfg = dataclasses.replace(BASE, env="probe-constant", uniform=True, backend=backend)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as e:
        run(cfg, mapping)
    assert "uniform" in e.value.fields


def test_run_places_uniform_replay_on_a_bare_device():
    from drlhet.runtime.run import run

    cfg = dataclasses.replace(BASE, env="probe-constant", uniform=True, steps=600)
    _, rows = run(cfg, "actors=cpu:0,replay=cpu:0,learner=cpu:0")
    assert len(rows) == 1


def test_a_delay_just_below_the_runs_learner_steps_is_taken():
    # 4 chunks x 400 / 4 envs x 2 SGD steps = 800 learner steps: the last update at 799 applies
    check(dataclasses.replace(BASE, delay=799))
    with pytest.raises(ConfigError, match=r"delay \(800\) must be below the run's learner steps"):
        check(dataclasses.replace(BASE, delay=800))
    check(dataclasses.replace(BASE, delay=800, uniform=True))  # no priorities to delay


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"seeds": 2.5}, "seeds", "seeds must be an integer, got float 2.5"),
        ({"steps": 2000.0}, "steps", "steps must be an integer, got float 2000.0"),
        ({"seed": True}, "seed", "seed must be an integer, got bool True"),
        ({"uniform": "yes"}, "uniform", "uniform must be True or False, got str 'yes'"),
        ({"env": None}, "env", "env must be text, got NoneType None"),
        ({"alpha": "0.6"}, "alpha", "alpha must be a number, got str '0.6'"),
        ({"n_step": 2.0}, "n_step", "n_step must be an integer or None, got float 2.0"),
        ({"algo": "sac"}, "algo", "algo must be 'dqn' or 'ddpg', got str 'sac'"),
        ({"dqn": {"hidden": (8,)}}, "dqn", "dqn must be a DQNConfig, got dict"),
        ({"dqn": DQNConfig(double="no")}, "dqn.double", "dqn.double must be True or False"),
        ({"ddpg": DDPGConfig(hidden=64)}, "ddpg.hidden", "ddpg.hidden must be a tuple of int"),
    ],
)
def test_a_field_of_another_kind_is_refused_naming_it(change, field, message):
    """A configuration made in Python is not type-checked by the dataclass: these failed deep
    in JAX naming no field, or (a text for a bool) ran as True."""
    with pytest.raises(ConfigError) as e:
        check(dataclasses.replace(BASE, **change))
    assert str(e.value).startswith(message) and e.value.fields == (field,)


def test_numbers_of_the_kinds_numpy_and_python_give_are_taken():
    check(dataclasses.replace(BASE, seeds=np.int64(2), alpha=1, beta_start=np.float32(0.5)))
    check(dataclasses.replace(BASE, n_step=None, backend=None, dqn=DQNConfig(hidden=(8, 8))))

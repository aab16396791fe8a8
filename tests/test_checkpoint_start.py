"""A library resume from a checkpoint (`Start.from_saved`) refuses a configuration other than
the one the checkpoint was saved with, but for the fields the mapping sets, before it touches
the state; ``Start(states, chunk)`` stays unchecked."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import pytest

from drlhet.agents.dqn import DQNConfig
from drlhet.checkpoint import Checkpoints, Saved
from drlhet.runtime.config import ConfigError, TrainConfig
from drlhet.runtime.run import Start, initial_example, run
from drlhet.runtime.saving import Saving
from tests.runtime.test_run import SMALL, assert_same_state


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """SMALL (2 chunks) saved after each chunk with its configuration, as the CLI saves it:
    ``(checkpoints, final state)``."""
    ckpt = Checkpoints(tmp_path_factory.mktemp("start") / "ckpt", keep=10)
    meta = {"config": dataclasses.asdict(SMALL), "mapping": ""}
    full, _ = run(SMALL, saving=Saving(1, lambda c, s, r: ckpt.save(c, s, r, meta)))
    return ckpt, jax.device_get(full)


def restore(saved_run, chunk: int) -> Saved:
    return saved_run[0].restore(initial_example(SMALL), chunk=chunk)


def test_the_configuration_saved_goes_on_bit_for_bit(saved_run):
    saved = restore(saved_run, 0)
    assert Start.from_saved(saved).config == saved.meta["config"]
    resumed, rows = run(SMALL, start=Start.from_saved(saved))
    assert [r["chunk"] for r in rows] == [1]
    assert_same_state(saved_run[1], resumed)


@pytest.mark.parametrize(
    "change,field,there,here",
    [
        ({"steps": SMALL.steps + 200}, "steps", SMALL.steps, SMALL.steps + 200),
        ({"seed": 7}, "seed", 0, 7),
        ({"env": "Acrobot-v1"}, "env", '"CartPole-v1"', '"Acrobot-v1"'),
        ({"dqn": DQNConfig(hidden=(16,), learning_rate=1e-3)}, "dqn.learning_rate", 5e-4, 1e-3),
        ({"dqn": DQNConfig(hidden=(32,))}, "dqn.hidden", [16], [32]),
    ],
)
def test_a_changed_field_is_refused_naming_it_and_both_values(
    saved_run, change, field, there, here
):
    saved = restore(saved_run, 0)
    with pytest.raises(ConfigError) as e:
        run(dataclasses.replace(SMALL, **change), start=Start.from_saved(saved))
    assert e.value.fields == (field,)
    message = str(e.value)
    assert "\n" not in message and f"{field} {there} there, {here} here" in message


def test_every_changed_field_is_named_in_one_line(saved_run):
    saved = restore(saved_run, 0)
    other = dataclasses.replace(SMALL, batch_size=64, alpha=0.5, delay=1)
    with pytest.raises(ConfigError, match="^start: .*saved with another configuration") as e:
        run(other, start=Start.from_saved(saved))
    assert e.value.fields == ("batch_size", "alpha", "delay")
    assert "\n" not in str(e.value)


def test_the_state_is_untouched_when_refused(saved_run):
    saved = restore(saved_run, 0)
    states = jax.device_put(saved.states, jax.devices()[0])  # what a chunk would donate
    before = restore(saved_run, 0).states  # (a host view of `states` would stop donation)
    lr = dataclasses.replace(SMALL, dqn=DQNConfig(hidden=(16,), learning_rate=1e-3))
    with pytest.raises(ConfigError, match="dqn.learning_rate"):
        run(lr, start=Start(states, saved.chunk, saved.meta["config"]))
    assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(states))
    assert_same_state(before, jax.device_get(states))


def test_the_fields_the_mapping_sets_may_change(saved_run):
    saved = restore(saved_run, 1)  # after the last chunk: nothing to run
    placed = dataclasses.replace(SMALL, backend="jax")
    states, rows = run(placed, start=Start.from_saved(saved))
    assert rows == [] and states is saved.states
    # a TrainConfig as the saved configuration; the mapping sets the replay backend
    states, rows = run(
        SMALL,
        "actors=cpu:0,replay=jax@cpu:0,learner=cpu:0",
        start=Start(saved.states, saved.chunk, placed),
    )
    assert rows == [] and states is saved.states


def test_a_start_without_config_is_unchecked(saved_run):
    saved = restore(saved_run, 1)
    other = dataclasses.replace(SMALL, dqn=DQNConfig(hidden=(16,), learning_rate=1e-3))
    states, rows = run(other, start=Start(saved.states, saved.chunk))
    assert rows == [] and states is saved.states


def test_a_field_the_checkpoint_lacks_has_its_default(saved_run):
    # as `drlhet train --resume` reads it (`config_from_dict`): {} is the default config
    saved = restore(saved_run, 1)
    with pytest.raises(ConfigError, match=r"steps 100000 there, 900 here"):
        run(SMALL, start=Start(saved.states, saved.chunk, {}))
    states, rows = run(TrainConfig(), start=Start(saved.states, 10**6, {"unknown": 1}))
    assert rows == [] and states is saved.states


def test_a_checkpoint_without_config_and_a_bad_config_are_refused(tmp_path):
    saved = Saved(0, {}, [], {"mapping": ""}, Path(tmp_path), [])
    with pytest.raises(ValueError, match=f"checkpoint {tmp_path} records no configuration"):
        Start.from_saved(saved)
    with pytest.raises(ValueError, match="start.config must be .* got list"):
        run(SMALL, start=Start({}, 0, [1]))


def test_checkpoint_saving_records_what_a_resume_is_checked_against(tmp_path):
    """`drlhet.checkpoint_saving`: the library's way to the checkpoints `Start.from_saved`
    takes (the configuration recorded; a resume under another one refused), earlier rows
    first, extra metadata kept; a bad ``every`` refused."""
    import dataclasses as dc

    import drlhet

    cfg = dc.replace(drlhet.TrainConfig(), env="probe-constant", steps=300, warmup=100,
                     eval_every=100, batch_size=16, buffer_size=200, eval_envs=2)  # fmt: skip
    store = drlhet.Checkpoints(tmp_path / "ckpt")
    before = [{"chunk": -1, "note": "earlier"}]
    saving = drlhet.checkpoint_saving(store, cfg, "fused", every=1, before=before, tag="x")
    drlhet.run(cfg, saving=saving)
    saved = store.restore(drlhet.initial_example(cfg))
    assert saved.meta["tag"] == "x" and saved.meta["mapping"] == "fused"
    assert saved.rows[0] == before[0] and [r["chunk"] for r in saved.rows[1:]] == [0, 1]
    drlhet.run(cfg, start=drlhet.Start.from_saved(saved))  # the same configuration: taken
    with pytest.raises(ValueError, match="saved with another configuration: seed 0 there"):
        drlhet.run(dc.replace(cfg, seed=1), start=drlhet.Start.from_saved(saved))
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="every must be an integer >= 1"):
            drlhet.checkpoint_saving(store, cfg, every=bad)

"""The library's entry points refuse what would otherwise fail late, train on the wrong arrays
or delete another run's checkpoints: each in one line naming the value, before anything is
trained, donated or deleted (`drlhet.run`, `drlhet.checkpoint_saving`, `Start`)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from drlhet.checkpoint import Checkpoints, checkpoint_saving
from drlhet.runtime.run import Start, initial_example, run
from tests.runtime.test_run import SMALL


def concrete(example):
    """Device arrays of ``example``'s shapes (zeros; typed keys from zero key data)."""

    def leaf(s):
        if jax.dtypes.issubdtype(s.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(jnp.zeros((*s.shape, 2), jnp.uint32))
        return jnp.zeros(s.shape, s.dtype)

    return jax.tree.map(leaf, example)


def write_checkpoint(store: Checkpoints, cfg, chunk: int = 0) -> None:
    store.save(chunk, {"x": np.arange(3)}, [{"chunk": chunk}], {
        "config": dataclasses.asdict(cfg), "mapping": ""})  # fmt: skip


@pytest.mark.parametrize(
    "change, leaf",
    [
        (
            {"buffer_size": 8192},
            r"^start.states.replay.storage\['action'\] is int32\[2, 4096\], int32\[2, 8192\] ",
        ),
        ({"seeds": 3}, r"^start.states\S* is float32\[2, 1\], float32\[3, 1\] in"),
    ],
)
def test_a_start_of_other_shapes_is_refused_before_its_states_are_donated(change, leaf):
    states = concrete(initial_example(SMALL))
    with pytest.raises(ValueError, match=leaf) as e:
        run(dataclasses.replace(SMALL, **change), start=Start(states, 0))
    assert "in this configuration" in str(e.value) and "\n" not in str(e.value)
    assert not any(x.is_deleted() for x in jax.tree.leaves(states))


def test_a_start_of_another_agent_is_refused_naming_the_structure():
    states = concrete(initial_example(dataclasses.replace(SMALL, delay=2)))
    with pytest.raises(ValueError, match=r"^start.states has another structure .*\d+ arrays"):
        run(SMALL, start=Start(states, 0))


@pytest.mark.parametrize("chunk", [-5, 0.5, "0", True, None])
def test_a_start_chunk_that_is_no_chunk_index_is_refused(chunk):
    with pytest.raises(ValueError, match=rf"^start.chunk must be .* got {chunk!r}$"):
        run(SMALL, start=Start({}, chunk))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"on_chunk": 5}, "on_chunk must be callable or None, got 5"),
        ({"stop_asked": True}, "stop_asked must be callable or None, got True"),
        ({"mapping": 3}, "mapping must be a Mapping, its text or None, got int"),
        ({"saving": "x"}, r"saving must be a Saving \(drlhet.checkpoint_saving\) or None, got str"),
        ({"start": (1, 2)}, "start must be a Start or None, got tuple"),
    ],
)
def test_arguments_of_the_wrong_kind_are_refused_before_training(kwargs, message):
    with pytest.raises(TypeError, match=f"^{message}$"):
        run(SMALL, **kwargs)
    with pytest.raises(TypeError, match="^cfg must be a TrainConfig, got dict$"):
        run({"env": "CartPole-v1"})  # type: ignore[arg-type]


def test_saving_made_for_another_configuration_is_refused(tmp_path):
    other = dataclasses.replace(SMALL, seed=7)
    saving = checkpoint_saving(Checkpoints(tmp_path / "ckpt"), other)
    with pytest.raises(ValueError, match="^saving was made for another .*: seed 7 there, 0 here$"):
        run(SMALL, saving=saving)
    assert not (tmp_path / "ckpt").exists()


def test_a_folder_with_another_runs_checkpoints_is_refused_and_kept(tmp_path):
    store = Checkpoints(tmp_path / "ckpt", keep=5)
    for chunk in (0, 1, 2):
        write_checkpoint(store, SMALL, chunk)
    other = dataclasses.replace(SMALL, seed=7)
    with pytest.raises(
        ValueError, match=r"holds the checkpoints of a run of another .*seed 0 ther"
    ):
        checkpoint_saving(Checkpoints(tmp_path / "ckpt"), other)
    assert store.chunks() == [0, 1, 2]
    # the same configuration (a resume, or the run again) and a placement of its own are taken
    checkpoint_saving(Checkpoints(tmp_path / "ckpt"), SMALL)
    checkpoint_saving(Checkpoints(tmp_path / "ckpt"), dataclasses.replace(SMALL, backend="jax"))


def test_metadata_json_cannot_write_is_refused_naming_its_key(tmp_path):
    with pytest.raises(ValueError, match=r"^meta note=<object .*> cannot be written as JSON"):
        checkpoint_saving(Checkpoints(tmp_path / "ckpt"), SMALL, note=object())


def test_a_run_beyond_the_memory_available_is_refused_before_anything_is_allocated(monkeypatch):
    # from Python it met XLA's out-of-memory error (or the kernel's OOM killer) mid-allocation
    monkeypatch.setattr(
        "drlhet.runtime.memory_check.available_memory", lambda: (2**10, "MemAvailable")
    )
    with pytest.raises(ValueError, match=r"^the run needs ~\S+ \S+ \(replay .*\), this machine "
                       r"has 1.0 KiB available \(MemAvailable\); lower buffer_size"):  # fmt: skip
        run(SMALL, on_chunk=lambda row: pytest.fail("trained"))
    with pytest.raises(TypeError, match="on_chunk"):  # memory_check=False: past the check
        run(SMALL, on_chunk=5, memory_check=False)

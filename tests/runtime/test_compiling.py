"""The run-time programs' compile options: every program of a run goes through them (the paths
stay bit-identical to each other only if they share them: tests/runtime/test_run.py)."""

from __future__ import annotations

import jax
import pytest

from drlhet.agents.dqn import DQNConfig
from drlhet.runtime import compiling
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import run

SMALL = TrainConfig(
    steps=300 + 200,
    warmup=300,
    eval_every=200,
    eval_envs=2,
    batch_size=32,
    buffer_size=1024,
    dqn=DQNConfig(hidden=(16, 16)),
)


@pytest.mark.parametrize("mapping", [None, "actors=cpu:0,replay=jax@cpu:1,learner=cpu:1"])
def test_every_program_of_a_run_takes_the_options(monkeypatch, mapping):
    # an option XLA does not know fails the first program compiled with it: the run's first
    # program (init) and, in the host loop, its stages all go through `compiling.jit`
    monkeypatch.setattr(compiling, "OPTIONS", {"drlhet_no_such_option": 1})
    with pytest.raises(jax.errors.JaxRuntimeError, match="drlhet_no_such_option"):
        run(SMALL, mapping)


def test_a_jitted_function_called_inside_programs_is_traced_once_and_computes_the_same():
    traced: list[int] = []

    def stage(x):
        traced.append(1)
        return jax.numpy.sin(x) * 3.0 + x

    outer = compiling.jit(stage)
    assert compiling.inlined(outer) is compiling.inlined(outer)  # one nested jit per function
    x = jax.numpy.linspace(-2.0, 2.0, 7)
    first = compiling.jit(lambda x: compiling.inlined(outer)(x) + 1.0)
    middle = compiling.jit(lambda x: compiling.inlined(outer)(compiling.inlined(outer)(x)))
    got = first(x), middle(x)
    assert len(traced) == 1  # two programs, three calls: traced once
    assert (got[0] == outer(x) + 1.0).all() and (got[1] == outer(outer(x))).all()
    assert len(traced) == 1  # the top-level program too: JAX keys traces by the function

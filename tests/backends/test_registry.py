"""The backend registry: backends describe themselves, and lookups say what is missing."""

from __future__ import annotations

import pytest

from drlhet import backends
from drlhet.backends import base
from drlhet.runtime.mapping import Mapping


def test_every_registered_backend_describes_itself():
    assert {"jax", "native", "python", "fpga"} <= set(backends.names())
    for name in backends.names():
        b = backends.get(name)
        assert b.platforms and set(b.platforms) <= set(backends.PLATFORMS)
        assert b.provides and set(b.provides) <= set(backends.GROUPS)
        assert b.needs and b.summary
    assert backends.reference() == "jax"
    rows = {r["name"]: r for r in backends.describe()}
    assert rows["jax"]["status"] == rows["native"]["status"] == "loads"
    assert "modeled only" in rows["python"]["status"]


def test_lookups_name_what_is_missing():
    with pytest.raises(backends.BackendUnavailable, match="no backend 'nope'; registered"):
        backends.get("nope")
    with pytest.raises(backends.BackendUnavailable, match="modeled only"):
        backends.load("python")
    with pytest.raises(backends.BackendUnavailable, match="does not implement the replay"):
        _learner_only_tree_ops()
    with pytest.raises(ValueError, match="unknown group"):
        backends.providing("planner")
    with pytest.raises(ValueError, match="bad platforms"):
        base.Backend("x", ("tpu",), ("replay",), "-", None)


def test_a_simulation_runs_but_is_never_a_default_nor_a_candidate():
    fpga = backends.get("fpga")
    assert fpga.runs_on(backends.CPU, "replay") and fpga.simulates(backends.CPU, "replay")
    assert fpga.runs_on(backends.CPU, "learner") and fpga.simulates(backends.CPU, "learner")
    assert "fpga" not in [b.name for b in backends.providing("learner", backends.CPU)]
    assert backends.default("learner", backends.CPU) == "jax"
    assert fpga.runs_on(backends.FPGA, "learner") and not fpga.simulates(backends.FPGA)
    assert "fpga" not in [b.name for b in backends.providing("replay", backends.CPU)]
    simulated = backends.providing("replay", backends.CPU, simulated=True)
    assert "fpga" in [b.name for b in simulated]
    assert backends.default("replay", backends.CPU) == "native"
    with pytest.raises(ValueError, match="bad platforms"):
        base.Backend("x", (backends.FPGA,), ("replay",), "-", None, simulation=("tpu", ()))


def test_a_learner_backend_says_how_it_trains():
    assert backends.learner_step("jax") is None  # the agents' own JAX step
    assert callable(backends.learner_step("fpga"))
    with pytest.raises(backends.BackendUnavailable, match="does not implement the learner"):
        backends.learner_step("native")


def _learner_only_tree_ops():
    """A backend that implements only the learner has no tree primitives."""
    fake = base.Backend("learner-only", (backends.CPU,), ("learner",), "nothing", lambda: None)
    backends.register(fake)
    try:
        backends.tree_ops("learner-only")
    finally:
        base._REGISTRY.pop("learner-only")


def test_default_is_the_best_ranked_backend_that_loads(monkeypatch):
    assert backends.default("replay", backends.CPU) == "native"
    assert backends.default("learner", backends.CPU) == "jax"

    def broken():
        raise backends.BackendUnavailable("its library is missing")

    fast = base.Backend("fast-but-broken", (backends.CPU,), ("replay",), "x", broken, rank=99)
    monkeypatch.setitem(base._REGISTRY, fast.name, fast)
    assert backends.providing("replay", backends.CPU)[0].name == "fast-but-broken"
    assert backends.default("replay", backends.CPU) == "native"  # the one that loads
    assert "fast-but-broken" not in [b.name for b in backends.providing("replay", runnable=True)]
    with pytest.raises(backends.BackendUnavailable, match="its library is missing"):
        Mapping.parse("actors=cpu:0,replay=fast-but-broken@cpu:0,learner=cpu:0").validate()


def test_the_default_for_a_tree_is_the_best_ranked_backend_that_holds_it():
    assert backends.default("replay", backends.CPU, (1000, 256)) == "native"
    assert backends.default("replay", backends.CPU, (1000, 300)) == "jax"  # native: K <= 256
    assert backends.default("replay", backends.GPU, (1000, 300)) == "jax"  # cuda: K <= 256


def test_a_new_backend_module_is_one_registration(monkeypatch):
    # what the mapping validation learns from a registration alone
    ref = backends.tree_ops("jax")
    twin = base.Backend("twin", (backends.CPU,), ("replay",), "nothing", lambda: ref, rank=-1)
    monkeypatch.setitem(base._REGISTRY, twin.name, twin)
    devices = Mapping.parse("actors=cpu:0,replay=twin@cpu:0,learner=cpu:0").validate()
    assert set(devices) == set(backends.GROUPS)
    with pytest.raises(ValueError, match="implements \\['replay'\\]"):
        Mapping.parse("actors=twin@cpu:0,replay=cpu:0,learner=cpu:0").validate()

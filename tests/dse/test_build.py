"""drlhet/dse/build.py's `merge_models`: the rounds' measured figures merged as medians, and
everything else the model holds kept (a field dropped changes what the merged model predicts)."""

from __future__ import annotations

import copy
import dataclasses

import jax
import pytest

from drlhet.dse.build import merge_models
from drlhet.dse.model import Model
from tests.dse.test_model import PROFILE, SHAPES, places, stats, toy_sheets


def rounds(**kw) -> list[Model]:
    """Three rounds whose sample took 30, 90 and 40 us and the host's replay_in 1, 3, 2 us."""
    out = []
    for sample, host in ((30, 1e-6), (90, 3e-6), (40, 2e-6)):
        prof = copy.deepcopy(PROFILE)
        prof["compute"]["sample"] = stats(sample)
        costs = {"python": {"replay_in": host, "replay_next": host, "apply": host}}
        out.append(Model(SHAPES, toy_sheets(), {"jax": prof}, 3, costs, **kw))
    return out


def test_every_field_but_the_measured_figures_is_kept():
    gpu = object()  # a stand-in for the GPU profiles: kept as it is
    merged = merge_models(rounds(host_driven=True, gpu=gpu))
    assert merged.profiles["jax"]["compute"]["sample"] == stats(40)
    assert merged.host_costs["python"]["replay_in"] == 2e-6
    first = rounds(host_driven=True, gpu=gpu)[0]
    kept = {k: v for k, v in vars(first).items() if k not in ("profiles", "host_costs")}
    assert kept and {k: getattr(merged, k) for k in kept} == kept
    assert merged.host_driven is True


def test_the_merged_model_predicts_the_host_driven_loops_it_was_given():
    two = places("jax@cpu:0", "jax@cpu:0", "jax@cpu:1")  # CPU only: channels unless host-driven
    host = merge_models(rounds(host_driven=True)).predict(two, delay=4)
    assert "busy host" in host.terms  # the host-driven loops' threads
    assert "busy host" not in merge_models(rounds()).predict(two, delay=4).terms


def test_rounds_of_different_runs_are_not_merged():
    with pytest.raises(ValueError, match="different runs"):
        merge_models([*rounds(host_driven=True), *rounds()])


def test_a_profile_cached_with_one_cpu_device_is_measured_again_with_two(monkeypatch, tmp_path):
    """A profile taken in a process of one CPU device has no hop or pipeline figures: reused in
    one of two (the tests'), every split mapping was infeasible ("profiled on 1 device")."""
    from drlhet.dse import build
    from drlhet.dse.cache import ProfileCache
    from drlhet.dse.key import ProfileKey

    assert len(jax.devices("cpu")) == 2  # tests/conftest.py
    key = ProfileKey(hidden=(8,), batch=16, capacity=1024, num_envs=2)
    cache = ProfileCache(tmp_path, fp="tests")
    one = {**PROFILE, "other_device": None, "transfer": {}, "pipeline": {}}
    two = {**PROFILE, "other_device": "TFRT_CPU_1"}
    backends = build.replay_backends_here(key)
    for b in backends:
        cache.put(dataclasses.replace(key, backend=b), one)
    asked = []

    def profile(k, device, other, log=None):
        asked.append(k.backend)
        return two if other is not None else one

    monkeypatch.setattr(build, "profile_config", profile)
    monkeypatch.setattr(build, "profile_python_replay", lambda k, device: {})
    m = build.build_model(key, cache=cache, log=lambda s: None)
    assert asked == backends and all(p == two for p in m.profiles.values())
    m = build.build_model(key, cache=cache, log=lambda s: None)  # the two-device ones, cached
    assert asked == backends and all(p == two for p in m.profiles.values())

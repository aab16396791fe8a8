"""Profiles (measured here), their cache, and the `drlhet dse` / `drlhet profile` commands run on
them (what the commands refuse before profiling: test_dse_refusals.py; what they write, on the
toy model: test_dse_outputs.py)."""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil

import jax
import pytest
from tiny_profile_key import TINY

from drlhet import backends
from drlhet.cli import main
from drlhet.dse.baselines import profile_python_replay
from drlhet.dse.build import build_model, replay_backends_here
from drlhet.dse.cache import ProfileCache
from drlhet.dse.profile import profile_config
from drlhet.dse.profile_pipeline import PIPELINE_FIGURES
from drlhet.dse.search import search

PRIMITIVES = ("actors", "insert", "sample", "train", "update")
FP = "tests"  # a fixed fingerprint: a rebuild of the package during the session keeps it


@pytest.fixture(scope="module")
def cache_base(tmp_path_factory):
    """A profile cache folder holding TINY's profiles, measured once for the module with few
    repeats and calls: these tests need real profiles of every backend, not precise ones (what
    the profilers measure is `test_profile_measures_every_primitive_stage_and_hop`'s, whose
    sizes these are, so that the programs it compiled load from the session's cache)."""
    base = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        few = functools.partial(profile_config, repeats=2, steps=10, calls=10)
        mp.setattr("drlhet.dse.build.profile_config", few)
        few_host = functools.partial(profile_python_replay, repeats=2, calls=20)
        mp.setattr("drlhet.dse.build.profile_python_replay", few_host)
        build_model(TINY, cache=ProfileCache(base, fp=FP), log=lambda s: None)
    return base


def for_the_cli(base):
    """``base`` with its profiles under this machine's and package's fingerprint now, as the
    CLI looks them up (``--cache-dir`` or ``$DRLHET_CACHE``)."""
    cache = ProfileCache(base, fp=FP)
    shutil.copy(cache.path, ProfileCache(base).path)
    return base


def test_cache_round_trip_and_fingerprint(tmp_path):
    cache = ProfileCache(tmp_path, fp="aaaa")
    assert cache.get(TINY) is None
    cache.put(TINY, {"compute": {"x": 1}})
    assert ProfileCache(tmp_path, fp="aaaa").get(TINY) == {"compute": {"x": 1}}
    # another machine or package version: another file, nothing reused
    assert ProfileCache(tmp_path, fp="bbbb").get(TINY) is None
    cache.path.write_text("{broken")
    with pytest.raises(ValueError, match="corrupt"):
        cache.get(TINY)


def test_profile_measures_every_primitive_stage_and_hop():
    cpus = jax.devices("cpu")
    said: list[str] = []
    prof = profile_config(TINY, cpus[0], cpus[1], repeats=2, steps=10, calls=10, log=said.append)
    # each part said as it is done (a profile took 4:53 on the 2-core VM with no word inside it)
    parts = ["primitives timed in", "stage calls timed", f"transfers to {cpus[1]}", "pipelined"]
    assert len(said) == len(parts) and all(p in line for p, line in zip(parts, said, strict=True))
    assert all(line.startswith("  ") and line.endswith(" s)") for line in said), said
    assert set(prof["compute"]) == {"actors", "insert", "sample", "train", "update"}
    assert set(prof["call"]) == {"actors", "replay_in", "replay_next", "apply", "learner"}
    assert set(prof["transfer"]) == {"transitions", "batch", "priorities", "params"}
    for group in ("compute", "call"):
        for name, s in prof[group].items():
            assert 0 < s["min"] <= s["median"] <= s["max"] < 1.0, (group, name)
    for name, s in prof["transfer"].items():
        # a hop between two devices costs more than the same chain on one device (a repeat
        # where it did not counts as 0: all repeats so is a defect), and well under 0.1 s
        assert 0 < s["median"] < 0.1, (name, s)
        assert s["min"] <= s["median"] <= s["max"], name
    # (which of a host-loop call and the compiled work is slower is a speed: not asserted here;
    # a 2-repeat profile of a tiny network had them within 3% either way)
    # the pipeline's own host costs, from a short pipelined run over the two devices
    assert set(prof["pipeline"]) == set(PIPELINE_FIGURES)
    for name, s in prof["pipeline"].items():
        assert 0 < s["min"] <= s["median"] <= s["max"] < 0.1, (name, s)
    assert prof["bytes"]["batch"] > prof["bytes"]["priorities"] > 0


def test_only_the_backends_that_hold_the_tree_are_profiled():
    here = replay_backends_here()
    assert "native" in here  # built by `pip install` everywhere the suite runs
    wide = replay_backends_here(dataclasses.replace(TINY, branching=300))
    assert wide == [b for b in here if b != "native"] and "jax" in wide
    assert replay_backends_here(TINY) == here


def test_build_model_reuses_the_cache(cache_base, monkeypatch, tmp_path):
    cache = ProfileCache(cache_base, fp=FP)
    logs: list[str] = []
    m = build_model(TINY, cache=cache, log=logs.append)
    assert logs == [] and set(m.profiles) == set(replay_backends_here())
    assert set(m.host_costs) == {"python"}  # cpprb is in the test extras
    preds = search(m, ["cpu:0", "cpu:1"], 0, present=["cpu:0", "cpu:1"])
    ours = [p for p in preds if p.places["replay"].backend != "python"]
    assert all(p.runnable and p.basis == "profiled" for p in ours)
    assert preds[0].trained_samples_per_s > preds[-1].trained_samples_per_s > 0
    # a reprofile asks every backend's profiler and the host baseline's again and caches what
    # they return. The profilers are stand-ins returning a marked copy of the cached profile
    # (real measuring is the fixture's and the test above's), on a copy of the module's cache,
    # which later tests read.
    cache = ProfileCache(shutil.copytree(cache_base, tmp_path / "cache"), fp=FP)
    asked: list[str] = []

    def again(k, *devices, **kw):
        asked.append(k.backend)
        return {**cache.get(k), "marked": True}

    monkeypatch.setattr("drlhet.dse.build.profile_config", again)
    monkeypatch.setattr("drlhet.dse.build.profile_python_replay", again)
    build_model(TINY, cache=cache, reprofile=True, log=logs.append)
    assert asked == [*replay_backends_here(), "python"]
    assert len(logs) == len(asked)
    for backend in asked:
        assert cache.get(dataclasses.replace(TINY, backend=backend))["marked"]


@pytest.mark.slow  # ~38 s: keeps the default suite under 15 minutes on the 2-core VM
def test_dse_command_ranks_and_labels(tmp_path, capsys, cache_base):
    out = tmp_path / "dse.json"
    main(
        [
            "dse",
            "--hidden",
            "8",
            "--batch",
            "16",
            "--capacity",
            "1024",
            "--num-envs",
            "2",
            "--devices",
            "cpu,h100,u250",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--out",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert "profiled" in text and "modeled" in text and "best runnable here" in text
    result = json.loads(out.read_text())
    rates = [p["trained_samples_per_s"] for p in result["predictions"]]
    assert rates == sorted(rates, reverse=True)
    bases = {p["basis"] for p in result["predictions"]}
    assert {"profiled", "modeled (sheet)", "modeled (cycle model)"} <= bases
    assert result["best_runnable"].startswith("actors=jax@cpu:")
    with pytest.raises(SystemExit) as stop:
        main(
            [
                "dse",
                "--devices",
                "cpu,tpu9",
                "--cache-dir",
                str(for_the_cli(cache_base)),
                "--hidden",
                "8",
                "--batch",
                "16",
                "--capacity",
                "1024",
                "--num-envs",
                "2",
                "--out",
                str(out),
            ]
        )
    assert stop.value.code == 2 and "no sheet" in capsys.readouterr().err


def test_train_mapping_auto_runs_the_dse_pick(tmp_path, capsys, monkeypatch, cache_base):
    monkeypatch.setenv("DRLHET_CACHE", str(for_the_cli(cache_base)))
    main(
        [
            "train",
            "--mapping",
            "auto",
            "--steps",
            "1400",
            "--warmup",
            "1000",
            "--eval-every",
            "200",
            "--eval-envs",
            "2",
            "--batch-size",
            "16",
            "--buffer-size",
            "1024",
            "--num-envs",
            "2",
            "--dqn.hidden",
            "8",
            "--out",
            str(tmp_path),
            "--name",
            "auto",
            "--no-progress",
        ]
    )
    text = capsys.readouterr().out
    assert "--mapping auto: actors=jax@cpu:" in text and "profiling" not in text
    rows = [json.loads(x) for x in (tmp_path / "auto" / "metrics.jsonl").read_text().splitlines()]
    assert rows and rows[-1]["mapping"].startswith("actors=jax@cpu:")


def test_auto_takes_a_gpu_here_only_as_measured_and_names_it_gpu0(
    tmp_path, monkeypatch, cache_base
):
    from drlhet.cli import auto as auto_cli
    from drlhet.cli import dse as dse_cli
    from drlhet.dse import build

    shutil.copytree(for_the_cli(cache_base), tmp_path / "cache")
    monkeypatch.setenv("DRLHET_CACHE", str(tmp_path / "cache"))

    class StandIn:  # a GPU as JAX reports it; nothing runs on it here
        device_kind = "NVIDIA H100 80GB HBM3"

    fast = {p: {"median": 1e-9, "min": 1e-9, "max": 1e-9} for p in PRIMITIVES}
    monkeypatch.setattr(build, "compute_figures", lambda key, device: fast)
    cfg = TINY.train_config()
    for where in (build, auto_cli):
        monkeypatch.setattr(where, "first_gpu", StandIn)
    logs: list[str] = []
    text = dse_cli.auto_mapping(cfg, 0, log=logs.append)
    # every group on the GPU; the replay by a backend that loads for it (jax, or cuda where its
    # library or host emulation is built: every figure is the same here)
    replay = text.split(",")[1].removeprefix("replay=").removesuffix("@gpu:0")
    assert text == f"actors=jax@gpu:0,replay={replay}@gpu:0,learner=jax@gpu:0"
    assert replay in [b.name for b in backends.providing("replay", backends.GPU, runnable=True)]
    assert any("profiled (h100 measured)" in line for line in logs), logs
    # asked for a replay backend that does not load on the GPU: the CPU's best
    assert dse_cli.auto_mapping(cfg, 0, log=logs.append, backend="native").startswith(
        "actors=jax@cpu:"
    )
    for where in (build, auto_cli):  # no GPU: the CPU's best, as before
        monkeypatch.setattr(where, "first_gpu", lambda: None)
    assert dse_cli.auto_mapping(cfg, 0, log=logs.append).startswith("actors=jax@cpu:")


def test_every_call_of_a_transfer_chain_is_a_hop(monkeypatch):
    # the figure is (chain across - chain on one device) / calls: the chain started on the
    # device of its first put, which moved nothing (calls - 1 hops, 10% short at 10 calls)
    from drlhet.dse import profile

    class Moved:
        def __init__(self, device):
            self.device = device

    hops = []

    def device_put(y, device):
        if isinstance(y, Moved) and y.device != device:
            hops.append((y.device, device))
        return Moved(device)

    monkeypatch.setattr(profile.jax, "device_put", device_put)
    profile._chain(object(), ("other", "here"), 10, lambda y: y)()
    assert len(hops) == 10
    hops.clear()
    profile._chain(object(), ("here",), 10, lambda y: y)()
    assert hops == []

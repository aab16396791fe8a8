"""Profiles (measured here), their cache, and the `drlhet dse` / `drlhet profile` commands."""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil

import jax
import pytest

from drlhet import backends
from drlhet.cli import main
from drlhet.dse.baselines import profile_python_replay
from drlhet.dse.build import build_model, replay_backends_here
from drlhet.dse.cache import ProfileCache
from drlhet.dse.key import ProfileKey
from drlhet.dse.profile import profile_config
from drlhet.dse.profile_pipeline import PIPELINE_FIGURES
from drlhet.dse.search import search

TINY = ProfileKey(hidden=(8,), batch=16, capacity=1024, num_envs=2, sgd_steps=2)
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
    prof = profile_config(TINY, cpus[0], cpus[1], repeats=2, steps=10, calls=10)
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


@pytest.mark.parametrize(
    "devices, message",
    [
        ("nonsense", "device 'nonsense' has no sheet"),
        ("cpu,pcie3", "'pcie3' is a link, not a device"),
        ("u250", "no device of u250 runs the actors"),
        ("cpu:5", "device 'cpu:5' is not present: this process has 2 CPU devices"),
        ("cpu:x", "device 'cpu:x': the index after ':' must be a number"),
        ("", "no devices given in ''"),  # not the default devices
    ],
)
def test_dse_refuses_bad_devices_before_profiling(tmp_path, capsys, monkeypatch, devices, message):
    def no_profiling(*args, **kwargs):
        pytest.fail("profiled before refusing the devices")

    monkeypatch.setattr("drlhet.cli.dse.build_model", no_profiling)
    with pytest.raises(SystemExit) as stop:
        main(
            [
                "dse",
                "--devices",
                devices,
                "--cache-dir",
                str(tmp_path),
                "--out",
                str(tmp_path / "d"),
            ]
        )
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"drlhet: error: --devices {devices}: ")
    assert message in err[0]


@pytest.mark.parametrize("command", ["dse", "profile"])
@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch", "2048", "--capacity", "1024"], "--batch (2048) must be <= --capacity (1024)"),
        # the shape's widths are both agents' (spelled as this command's option)
        (["--hidden", "64", "0"], "--hidden must be layer widths >= 1, got (64, 0)"),
        (["--num-envs", "0"], "--num-envs must be >= 1, got 0"),  # not a division by zero
        # every backend that loads is profiled: a named one was ignored, not profiled alone
        (
            ["--backend", "bogus"],
            "--backend bogus: every replay backend that loads here is profiled; drop --backend",
        ),
        (["--cpu-devices", "100000"], "--cpu-devices must be in [1, 1024], got 100000"),
    ],
)
def test_a_shape_that_cannot_train_is_refused_before_profiling(
    capsys, monkeypatch, command, args, message
):
    monkeypatch.setattr("drlhet.cli.dse.build_model", lambda *a, **k: pytest.fail("profiled"))
    with pytest.raises(SystemExit) as stop:
        main([command, *args])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"drlhet: error: {message}"]


def test_a_gpu_profile_that_is_a_folder_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("drlhet.cli.dse.build_model", lambda *a, **k: pytest.fail("profiled"))
    with pytest.raises(SystemExit) as stop:  # was "failed: IsADirectoryError", exit 1
        main(["dse", "--gpu-profile", str(tmp_path), "--out", str(tmp_path / "d.json")])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"GPU profile {tmp_path} cannot be read (Is a directory)" in err[0]


def test_auto_takes_a_gpu_here_only_as_measured_and_names_it_gpu0(
    tmp_path, monkeypatch, cache_base
):
    from drlhet.cli import dse as dse_cli
    from drlhet.dse import build

    shutil.copytree(for_the_cli(cache_base), tmp_path / "cache")
    monkeypatch.setenv("DRLHET_CACHE", str(tmp_path / "cache"))

    class StandIn:  # a GPU as JAX reports it; nothing runs on it here
        device_kind = "NVIDIA H100 80GB HBM3"

    fast = {p: {"median": 1e-9, "min": 1e-9, "max": 1e-9} for p in PRIMITIVES}
    monkeypatch.setattr(build, "compute_figures", lambda key, device: fast)
    cfg = TINY.train_config()
    for where in (build, dse_cli):
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
    for where in (build, dse_cli):  # no GPU: the CPU's best, as before
        monkeypatch.setattr(where, "first_gpu", lambda: None)
    assert dse_cli.auto_mapping(cfg, 0, log=logs.append).startswith("actors=jax@cpu:")


@pytest.mark.parametrize("command", ["dse", "profile"])
def test_outputs_that_cannot_be_written_are_refused_before_profiling(
    tmp_path, capsys, monkeypatch, command
):
    monkeypatch.setattr("drlhet.cli.dse.build_model", lambda *a, **k: pytest.fail("profiled"))
    (tmp_path / "file").write_text("")
    cases = [
        (
            ["--cache-dir", str(tmp_path / "file" / "cache")],
            f"--cache-dir {tmp_path}/file/cache: no cache can be made in {tmp_path}/file "
            "(Not a directory)",
        )
    ]
    if command == "dse":
        cases += [
            (["--out", str(tmp_path)], f"--out {tmp_path} is a folder; name the JSON file"),
            (
                ["--out", str(tmp_path / "file" / "dse.json")],
                f"no file can be made in {tmp_path}/file (Not a directory)",
            ),
        ]
    for args, message in cases:
        with pytest.raises(SystemExit) as stop:
            main([command, *args])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("drlhet: error: ") and message in err[0]
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_the_dse_predicts_and_measures_runs_in_the_chunks_of_the_run(tmp_path, monkeypatch):
    """The pipeline's iterations per call divide a chunk's iterations (`drlhet.dse.pipelined
    .unroll`): `drlhet dse` predicts (and ``--measure`` runs) the shape's own run, and
    ``--mapping auto`` predicts the run it picks for, each in its chunks of ``eval_every``."""
    from drlhet.cli import dse as dse_cli
    from drlhet.dse.model import Model
    from tests.dse.test_model import NATIVE, PROFILE, SHAPES, toy_sheets

    asked: list[tuple[str, int]] = []

    def build(key, **kw):  # the toy model of tests/dse/test_model.py, at this chunk
        asked.append(("model", kw["eval_every"]))
        shapes = dataclasses.replace(SHAPES, iterations=kw["eval_every"] // key.num_envs)
        return Model(shapes, toy_sheets(), {"jax": PROFILE, "native": NATIVE}, cpu_cores=2)

    def measure(key, text, delay, chunk_steps):
        asked.append(("measured", chunk_steps))
        return {"trained_samples_per_s": 1.0}

    monkeypatch.setattr(dse_cli, "build_model", build)
    monkeypatch.setattr(dse_cli, "measure_mapping", measure)
    out = tmp_path / "d.json"
    args = ["dse", "--num-envs", "2", "--delay", "8", "--devices", "cpu", "--measure"]
    main([*args, "--cache-dir", str(tmp_path), "--out", str(out)])
    every = dataclasses.replace(TINY, num_envs=2).train_config().eval_every
    assert asked[0] == ("model", every) and set(asked[1:]) == {("measured", every)}
    asked.clear()
    cfg = TINY.train_config(eval_every=TINY.num_envs * 625, delay=8)
    dse_cli.auto_mapping(cfg, cfg.delay, log=lambda s: None)
    assert asked == [("model", TINY.num_envs * 625)]


def test_the_json_and_the_table_label_each_figure_as_what_it_is(tmp_path, monkeypatch, capsys):
    """Every row of ``--out`` carries its own basis (profiled here, modeled from a sheet) and,
    with ``--measure``, what was measured of it (runnable rows only); the table prints it."""
    from drlhet.cli import dse as dse_cli
    from drlhet.dse.model import Model
    from tests.dse.test_model import NATIVE, PROFILE, SHAPES, toy_sheets

    sheets = toy_sheets()
    sheets["h100"] = {**sheets["gpu"], "name": "h100"}  # the toy GPU, named as a shipped sheet

    def build(key, **kw):
        return Model(SHAPES, sheets, {"jax": PROFILE, "native": NATIVE}, cpu_cores=2)

    measured = iter(range(1, 1000))
    monkeypatch.setattr(dse_cli, "build_model", build)
    monkeypatch.setattr(
        dse_cli, "measure_mapping", lambda *a, **k: {"trained_samples_per_s": next(measured)}
    )
    out = tmp_path / "d.json"
    args = ["dse", "--devices", "cpu,h100", "--measure", "--top", "1000"]
    main([*args, "--cache-dir", str(tmp_path), "--out", str(out)])
    rows = json.loads(out.read_text())["predictions"]
    table = capsys.readouterr().out
    got = {r["mapping"]: r["measured_trained_samples_per_s"] for r in rows if r["runnable"]}
    assert sorted(got.values()) == list(range(1, len(got) + 1))  # each its own measurement
    for r in rows:
        on_gpu = "@h100" in r["mapping"]
        assert r["basis"] == ("modeled (sheet)" if on_gpu else "profiled"), r
        assert r["runnable"] is (not on_gpu) or r["note"], r
        if not r["runnable"]:
            assert r["measured_trained_samples_per_s"] is None, r
    for mapping, rate in got.items():
        line = next(x for x in table.splitlines() if f" {mapping} " in x)
        assert line.split()[-1] == f"{rate:,}" and "profiled" in line, line


@pytest.mark.parametrize("command", ["dse", "profile"])
def test_a_shape_this_machine_cannot_hold_is_refused_before_profiling(
    tmp_path, capsys, monkeypatch, command
):
    # it was profiled, and allocated its buffer (twice) until the machine ran out of memory
    monkeypatch.setattr("drlhet.cli.dse.build_model", lambda *a, **k: pytest.fail("profiled"))
    monkeypatch.setattr("drlhet.cli.dse.available_memory", lambda: (2**30, "MemAvailable"))
    out = ["--cache-dir", str(tmp_path / "cache")] + (
        ["--out", str(tmp_path / "d.json")] if command == "dse" else []
    )
    cases = [
        (["--capacity", "20000000"], "--capacity 20000000: profiling it needs ~"),
        (["--hidden", "20000", "20000"], "--hidden 20000 20000: profiling it needs ~"),
    ]
    if command == "dse":  # a measured run holds its delayed updates: k x B entries
        delay = ["--delay", "100000000", "--measure", "--hidden", "8"]
        cases.append((delay, "--delay 100000000: a run measured at it needs ~"))
    for args, message in cases:
        with pytest.raises(SystemExit) as stop:
            main([command, *args, *out])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"drlhet: error: {message}"), err
        assert err[0].endswith("this machine has 1.0 GiB available (MemAvailable)")
    assert list(tmp_path.iterdir()) == []
    # predicted only (no --measure), a long delay holds nothing: not refused
    from drlhet.cli.dse import _check_shape

    _check_shape(TINY, None)
    with pytest.raises(ValueError, match="--delay 100000000: a run measured at it"):
        _check_shape(TINY, 10**8)


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

"""GPU profiles in the DSE: primitives measured on a GPU replace its sheet model, labelled so."""

from __future__ import annotations

import json
import math

import pytest
from test_model import model, places, stats

from drlhet.dse import build
from drlhet.dse.cache import ProfileCache
from drlhet.dse.gpu_profile import (
    GpuProfiles,
    load_gpu_profiles,
    profile_row,
    sheet_for_device,
)
from drlhet.dse.key import ProfileKey

US = 1e-6
PREFIX = "dqn-CartPole-v1-h64x64-B100-C4096-K16-E4-S2"


def figures(**us) -> dict:
    base = {"actors": 40, "insert": 30, "sample": 20, "train": 50, "update": 10}
    return {p: stats(v) for p, v in {**base, **us}.items()}


def rows() -> list[dict]:
    return [
        profile_row(f"{PREFIX}-jax", "jax", "Toy GPU 80GB", "gpu", figures(sample=120)),
        profile_row(f"{PREFIX}-cuda", "cuda", "Toy GPU 80GB", "gpu", figures(train=70)),
        # another shape: ignored for this run
        profile_row(
            "dqn-CartPole-v1-h64x64-B999-C4096-K16-E4-S2-jax", "jax", "Toy", "gpu", figures()
        ),
    ]


def test_a_device_is_matched_to_the_sheet_named_in_its_kind():
    assert sheet_for_device("NVIDIA H100 80GB HBM3") == "h100"
    assert sheet_for_device("NVIDIA A100-SXM4-40GB") == "a100"
    assert sheet_for_device("NVIDIA H200") == "h200"
    assert sheet_for_device("Tesla T4") is None  # no sheet: stays unprofiled
    assert sheet_for_device("Toy GPU", {"gpu": {"kind": "gpu"}, "link": {"kind": "link"}}) == "gpu"


def test_profiles_keep_the_rows_of_the_run_shape_only():
    gp = GpuProfiles(rows(), PREFIX, "jax")
    assert gp.has("gpu") and gp.has("gpu", "cuda") and not gp.has("gpu", "native")
    assert not gp.has("h100")
    assert gp.seconds("gpu", "sample", "jax") == pytest.approx(120 * US)
    # the actors and the learner: the reference's row (the cuda row's train, 70 us, holds the
    # gather its sample leaves to the learner: booked to cuda's sample, 20 + 20 us)
    assert gp.seconds("gpu", "train", None) == pytest.approx(50 * US)
    assert gp.seconds("gpu", "sample", "cuda") == pytest.approx(40 * US)
    assert gp.seconds("gpu", "update", "cuda") == pytest.approx(10 * US)
    # without a reference row: the median over the rows (of two, the upper one)
    other = [profile_row(f"{PREFIX}-x", "x", "Toy", "gpu", figures(train=90)), rows()[1]]
    assert GpuProfiles(other, PREFIX, "jax").seconds("gpu", "train", None) == pytest.approx(90 * US)
    assert GpuProfiles(other, PREFIX, "jax").seconds("gpu", "sample", "cuda") == pytest.approx(
        20 * US
    )
    assert not GpuProfiles(rows(), "another-shape")


def test_a_fused_gpu_mapping_costs_what_was_measured_and_says_so():
    m = model(gpu=GpuProfiles(rows(), PREFIX, "jax"))
    p = m.predict(places("jax@gpu", "cuda@gpu", "jax@gpu"))
    # actors + insert + S (sample + train + update), all as the cuda row measured them (its
    # train's excess over the reference's booked to its sample)
    assert p.iteration_s == pytest.approx((40 + 30 + 2 * (20 + 70 + 10)) * US)
    assert p.basis == "profiled (gpu measured)"
    # the jax replay on the same GPU costs its own row (sample 120 us, train 50 us)
    q = m.predict(places("jax@gpu", "jax@gpu", "jax@gpu"))
    assert q.iteration_s == pytest.approx((40 + 30 + 2 * (120 + 50 + 10)) * US)


def test_a_split_with_a_measured_gpu_rests_on_the_sheets_too():
    m = model(gpu=GpuProfiles(rows(), PREFIX, "jax"))
    p = m.predict(places("jax@cpu:0", "native@cpu:0", "jax@gpu"))
    assert p.basis == "modeled (gpu measured, sheet)"
    # without the profile, the same mapping is the sheet's
    assert model().predict(places("jax@cpu:0", "native@cpu:0", "jax@gpu")).basis == (
        "modeled (sheet)"
    )


def test_an_unmeasured_backend_on_a_measured_gpu_keeps_the_sheet_model():
    only_jax = [r for r in rows() if r["backend"] == "jax"]
    m = model(gpu=GpuProfiles(only_jax, PREFIX))
    sheet_model = model().compute("replay", places("jax@gpu", "cuda@gpu", "jax@gpu")["replay"])
    assert m.compute("replay", places("jax@gpu", "cuda@gpu", "jax@gpu")["replay"]) == sheet_model
    assert m.predict(places("jax@gpu", "cuda@gpu", "jax@gpu")).basis == (
        "modeled (gpu measured, sheet)"
    )


TEXT_SAMPLE = {"sample": {"median": "1e-6"}}


def odd(median: float) -> dict:
    return {"train": stats(median)}


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "does not exist"),
        ("{not json", "not valid JSON"),
        ('{"a": 1}', "not a list of rows"),
        ('[{"key": "k", "backend": "jax"}]', "row 0 lacks 'device_kind'"),
        # what the model reads of a row, of the type it reads (was a KeyError or a TypeError
        # halfway through the search)
        (json.dumps([profile_row("k", "jax", "Toy", ["gpu"], figures())]),
         r"row 0's sheet is \['gpu'\], not text"),
        (json.dumps([profile_row("k", "jax", "Toy", "gpu", [1])]),
         r"row 0's compute is \[1\], not an object"),
        (json.dumps([*rows(), profile_row("k", "jax", "Toy", "gpu", figures() | {"train": {}})]),
         r"row 3's compute lacks a median time of 'train' \(got \{\}\)"),
        (json.dumps([profile_row("k", "jax", "Toy", "gpu", figures() | TEXT_SAMPLE)]),
         "row 0's compute lacks a median time of 'sample'"),
        (json.dumps([profile_row("k", "jax", "Toy", "gpu", {"sample": stats(1)})]),
         r"row 0's compute lacks a median time of 'actors' \(got None\)"),
        # JSON reads NaN and Infinity: a time the model would carry into every prediction
        (json.dumps([profile_row("k", "jax", "Toy", "gpu", figures() | odd(math.nan))]),
         r"row 0's compute lacks a median time of 'train' \(got \{'median': nan"),
        (json.dumps([profile_row("k", "jax", "Toy", "gpu", figures() | odd(math.inf))]),
         r"row 0's compute lacks a median time of 'train' \(got \{'median': inf"),
    ],
)  # fmt: skip
def test_a_bad_profile_file_is_refused_with_its_reason(tmp_path, content, message):
    path = tmp_path / "gpu.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_gpu_profiles(path)


def test_a_profile_file_round_trips(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(rows()))
    assert (
        GpuProfiles(load_gpu_profiles(path), PREFIX).figures
        == GpuProfiles(rows(), PREFIX, "jax").figures
    )


class _StandIn:
    """A GPU as JAX would report it (the CPU stands in: only its kind is read)."""

    device_kind = "NVIDIA H100 80GB HBM3"


def test_a_gpu_present_here_is_profiled_once_then_read_from_the_cache(tmp_path, monkeypatch):
    calls = []

    def measure(key, device):
        calls.append((key.backend, device.device_kind))
        return figures()

    monkeypatch.setattr(build, "first_gpu", lambda: _StandIn())
    monkeypatch.setattr(build, "compute_figures", measure)
    key = ProfileKey(batch=100, capacity=4096)
    cache = ProfileCache(tmp_path, fp="test")
    got = build.gpu_rows_here(key, cache, log=lambda _: None)
    assert calls and all(kind == _StandIn.device_kind for _, kind in calls)
    assert {r["backend"] for r in got} == {b for b, _ in calls}
    assert all(r["sheet"] == "h100" and r["compute"] == figures() for r in got)
    assert build.gpu_rows_here(key, cache, log=lambda _: None) == got  # cached
    assert len(calls) == len(got)
    monkeypatch.setattr(build, "first_gpu", lambda: None)
    assert build.gpu_rows_here(key, cache, log=lambda _: None) == []


def test_a_cuda_profile_is_measured_again_when_its_path_switches_change(tmp_path, monkeypatch):
    """The cuda backend's module switches (read when traced) change what a profile measures;
    a profile cached under other switches was reused as if measured with these."""
    from drlhet.backends import cuda

    calls = []

    def measure(key, device):
        calls.append(key.backend)
        return figures()

    monkeypatch.setattr(build, "first_gpu", lambda: _StandIn())
    monkeypatch.setattr(build, "compute_figures", measure)
    monkeypatch.setattr(build, "replay_backends_here", lambda key, platform: [cuda.BACKEND.name])
    key = ProfileKey(batch=100, capacity=4096)
    cache = ProfileCache(tmp_path, fp="test")
    build.gpu_rows_here(key, cache, log=lambda _: None)
    build.gpu_rows_here(key, cache, log=lambda _: None)
    assert len(calls) == 1  # cached
    was = cuda.CLUSTER_MAX_BATCH
    monkeypatch.setattr(cuda, "CLUSTER_MAX_BATCH", 0)
    build.gpu_rows_here(key, cache, log=lambda _: None)
    assert len(calls) == 2  # other switches: measured again
    monkeypatch.setattr(cuda, "CLUSTER_MAX_BATCH", was)
    monkeypatch.setattr(cuda, "KEY_TARGETS", False)
    build.gpu_rows_here(key, cache, log=lambda _: None)
    assert len(calls) == 3 and len(cache.load()) == 3


@pytest.mark.parametrize("content", [None, "[{}]"])
def test_the_cli_refuses_a_bad_gpu_profile_in_one_line_before_profiling(
    tmp_path, capsys, monkeypatch, content
):
    from drlhet.cli import main

    monkeypatch.setattr("drlhet.cli.dse.build_model", lambda *a, **k: pytest.fail("profiled"))
    path = tmp_path / "gpu.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as stop:
        main(["dse", "--gpu-profile", str(path), "--cache-dir", str(tmp_path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"drlhet: error: GPU profile {path}"), err

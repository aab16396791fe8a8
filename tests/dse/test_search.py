"""The search reads the backend registry: a backend added there is enumerated with no edit in
`drlhet.dse`, host backends get one placement, modeled-only ones are never runnable."""

from __future__ import annotations

import dataclasses

import pytest
from test_model import NATIVE, PROFILE, SHAPES, US, places, toy_sheets

from drlhet.backends import base
from drlhet.backends.base import CPU, FPGA, GPU, Backend, get
from drlhet.dse.model import Model, Place
from drlhet.dse.search import best_to_run, enumerate_mappings, search

HOST = {"replay_in": 500 * US, "replay_next": 500 * US, "apply": 100 * US}


@pytest.fixture
def registry(monkeypatch):
    """Registers backends for one test only (the registry and its load cache are restored)."""
    base.names()  # discover the real backends first
    monkeypatch.setattr(base, "_LOADED", dict(base._LOADED))

    def add(backend: Backend) -> Backend:
        monkeypatch.setitem(base._REGISTRY, backend.name, backend)
        return backend

    return add


def replay_places(maps) -> set[str]:
    return {str(m["replay"]) for m in maps}


def test_a_registered_backend_is_enumerated_and_runs_only_if_it_loads(registry):
    registry(Backend("toy_gpu", (GPU,), ("replay", "learner"), "nothing", loader=None))
    registry(Backend("toy_cpu", (CPU,), ("replay",), "nothing", loader=lambda: object()))
    profiles = {"jax": PROFILE, "native": NATIVE, "toy_cpu": NATIVE}
    m = Model(SHAPES, toy_sheets(), profiles, cpu_cores=2)
    maps = enumerate_mappings(m, ["cpu:0", "gpu"])
    assert {"toy_gpu@gpu", "toy_cpu@cpu:0", "jax@gpu", "native@cpu:0"} <= replay_places(maps)
    assert "toy_gpu@gpu" in {str(x["learner"]) for x in maps}
    assert "toy_cpu@gpu" not in replay_places(maps)  # the registry says CPU only
    preds = search(m, ["cpu:0", "gpu"], 0, present=["cpu:0", "gpu"])  # as if a GPU were here
    by_replay = {p.places["replay"].backend: p for p in preds if p.runnable}
    assert "toy_cpu" in by_replay  # loads here (the default backends_here)
    toy_gpu = [p for p in preds if "toy_gpu" in p.mapping_text()]
    assert toy_gpu and not any(p.runnable for p in toy_gpu)  # modeled only: never runnable
    # even when named as present: modeled only wins
    preds = search(m, ["gpu"], 0, present=["gpu"], backends_here=["toy_gpu", "jax"])
    assert not any(p.runnable for p in preds if "toy_gpu" in p.mapping_text())


def test_a_cpu_replay_backend_without_a_profile_is_not_enumerated(registry):
    registry(Backend("toy_cpu", (CPU,), ("replay",), "nothing", loader=lambda: object()))
    m = Model(SHAPES, toy_sheets(), {"jax": PROFILE}, cpu_cores=2)
    assert replay_places(enumerate_mappings(m, ["cpu:0"])) == {"jax@cpu:0"}


def test_a_host_backend_gets_one_place_when_its_costs_are_known(registry):
    devices = ["cpu:0", "cpu:1", "gpu"]
    without = Model(SHAPES, toy_sheets(), {"jax": PROFILE}, cpu_cores=2)
    assert not any(m["replay"].backend == "python" for m in enumerate_mappings(without, devices))
    with_costs = Model(SHAPES, toy_sheets(), {"jax": PROFILE}, host_costs={"python": HOST})
    replays = {m["replay"] for m in enumerate_mappings(with_costs, devices)}
    assert {str(p) for p in replays if get(p.backend).host} == {"python@cpu:0"}
    assert "python@cpu:0" not in replay_places(enumerate_mappings(with_costs, devices, host=False))
    # a second host backend with no costs gets no place
    registry(Backend("toy_host", (CPU,), ("replay",), "nothing", loader=None, host=True))
    assert "toy_host@cpu:0" not in replay_places(enumerate_mappings(with_costs, devices))
    with_both = Model(
        SHAPES, toy_sheets(), {"jax": PROFILE}, host_costs={"python": HOST, "toy_host": HOST}
    )
    assert "toy_host@cpu:0" in replay_places(enumerate_mappings(with_both, devices))


def test_infeasibility_is_read_from_the_registry(registry):
    m = Model(SHAPES, toy_sheets(), {"jax": PROFILE}, cpu_cores=2)
    fpga_actors = places("toy_actors@fpga", "fpga@fpga", "fpga@fpga")
    assert "no backend" in m.infeasible(fpga_actors)
    registry(Backend("toy_actors", (FPGA,), ("actors",), "nothing", loader=None))
    assert m.infeasible(fpga_actors) == ""
    assert "implements the replay only" in m.infeasible(
        places("jax@cpu:0", "native@cpu:0", "native@cpu:0")
    )
    assert "no backend 'nope'" in m.infeasible(places("nope@cpu:0", "jax@cpu:0", "jax@cpu:0"))


def test_default_backends_here_are_those_that_load():
    m = Model(SHAPES, toy_sheets(), {"jax": PROFILE, "native": NATIVE}, cpu_cores=2)
    preds = search(m, ["cpu:0", "cpu:1"], 0, present=["cpu:0", "cpu:1"])
    runnable = {p.places["replay"].backend for p in preds if p.runnable}
    assert runnable == {n for n in ("jax", "native") if base.loads(n)}


def test_a_link_is_not_a_device():
    m = Model(SHAPES, toy_sheets(), {"jax": PROFILE})
    with pytest.raises(ValueError, match="not a device"):
        enumerate_mappings(m, ["cpu:0", "link"])
    assert Place("jax", "gpu") in {x["learner"] for x in enumerate_mappings(m, ["cpu:0", "gpu"])}


def _pred(a: str, r: str, ln: str, rate: float, runnable: bool, note: str = ""):
    p = Model(SHAPES, toy_sheets(), {"jax": PROFILE, "native": NATIVE}).predict(places(a, r, ln))
    return dataclasses.replace(p, trained_samples_per_s=rate, runnable=runnable, note=note)


def test_best_to_run_takes_a_fused_mapping_on_the_gpu_here_named_as_the_runtime_names_it():
    on_gpu = _pred("jax@gpu", "jax@gpu", "jax@gpu", 3.0, runnable=False)
    split = _pred("jax@cpu:0", "jax@gpu", "jax@gpu", 4.0, runnable=False)
    infeasible = _pred("jax@gpu", "jax@gpu", "jax@gpu", 5.0, runnable=False, note="too big")
    on_cpu = _pred("jax@cpu:0", "native@cpu:0", "jax@cpu:0", 2.0, runnable=True)
    preds = [infeasible, split, on_gpu, on_cpu]  # best first
    got = best_to_run(preds, "gpu", ["jax"])
    assert got == (on_gpu, f"actors=jax@{GPU}:0,replay=jax@{GPU}:0,learner=jax@{GPU}:0")
    # no GPU here, or its replay backend does not load there: the best runnable CPU mapping
    assert best_to_run(preds, None, ["jax"]) == (on_cpu, on_cpu.mapping_text())
    assert best_to_run(preds, "gpu", ["cuda"]) == (on_cpu, on_cpu.mapping_text())
    assert best_to_run([split, infeasible], "gpu", ["jax"]) is None


def test_the_model_shares_the_cpus_the_process_may_run_on(monkeypatch):
    """`usable_cpus`: the process's affinity (one CPU under ``taskset -c 3``), not the
    machine's count; where the platform has no affinity, the machine's."""
    import os

    from drlhet.dse.build import usable_cpus

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert usable_cpus() == 1
    monkeypatch.delattr(os, "sched_getaffinity")
    assert usable_cpus() == 64


def test_a_host_replay_pays_no_hop_to_a_cpu_device():
    # the host buffer's measured stages fetch the transitions from a CPU device and put the
    # batches on one (any: they share the host's memory): a CPU-to-CPU transfer between its
    # nominal cpu:0 and the actors or learner on cpu:1 was charged on top (45 us more here)
    m = Model(SHAPES, toy_sheets(), {"jax": PROFILE}, cpu_cores=2, host_costs={"python": HOST})
    # actors' latency 70 + replay_in 500 + replay_next 500 + apply 100 + 2 learner calls 220
    chain = 70 + 500 + 500 + 100 + 2 * 220
    for a, ln, params in (("cpu:0", "cpu:0", 0), ("cpu:1", "cpu:1", 0), ("cpu:1", "cpu:0", 60)):
        p = m.predict(places(f"jax@{a}", "python@cpu:0", f"jax@{ln}"), delay=0)
        assert p.iteration_s == pytest.approx((chain + params) * US), (a, ln)
    # to an accelerator the batches still cross its link (toy: 2 us + 10,000 B / 1 GB/s)
    p = m.predict(places("jax@cpu:1", "python@cpu:0", "jax@gpu"), delay=0)
    gpu_chain = 70 + 500 + 500 + 100 + 2 * 44 + 2 * (2 + 10) + 2 * (2 + 1) + (2 + 100)
    assert p.iteration_s == pytest.approx(gpu_chain * US)


def test_a_device_named_twice_is_searched_once():
    from drlhet.dse.search import expand_devices

    assert expand_devices("cpu, CPU:1,cpu:0,gpu,GPU", 2) == ["cpu:0", "cpu:1", "gpu"]
    m = Model(SHAPES, toy_sheets(), {"jax": PROFILE}, cpu_cores=2)
    maps = [str(x) for x in enumerate_mappings(m, expand_devices("cpu:0,cpu,cpu:0", 2))]
    assert len(maps) == len(set(maps)) == 4  # 2 * 2 * 2 placements, 4 up to a swap of CPUs


def test_each_baseline_family_holds_its_mappings_only():
    from drlhet.dse.baselines import families

    m = Model(SHAPES, toy_sheets(), {"jax": PROFILE, "native": NATIVE}, host_costs={"python": HOST})
    fams = families(m)
    cases = {
        "all on CPU (jax)": [
            ("jax@cpu:0", "jax@cpu:0", "jax@cpu:0", True),
            ("jax@cpu:0", "native@cpu:0", "jax@cpu:0", False),  # not the reference replay
            ("jax@cpu:0", "jax@cpu:0", "jax@cpu:1", False),  # two devices
        ],
        "replay on CPU, learner on GPU": [
            ("jax@cpu:1", "native@cpu:0", "jax@gpu", True),
            ("jax@gpu", "native@cpu:0", "jax@gpu", False),  # the actors on the GPU
            ("jax@cpu:0", "python@cpu:0", "jax@gpu", False),  # a host replay
            ("jax@cpu:0", "jax@cpu:0", "jax@cpu:1", False),
        ],
        "all on GPU": [
            ("jax@gpu", "cuda@gpu", "jax@gpu", True),
            ("jax@cpu:0", "cuda@gpu", "jax@gpu", False),
        ],
        "paper-style: Python replay": [
            ("jax@cpu:0", "python@cpu:0", "fpga@fpga", True),
            ("jax@cpu:0", "jax@cpu:0", "jax@cpu:0", False),
        ],
    }
    assert set(fams) == set(cases)
    for name, rows in cases.items():
        for a, r, ln, member in rows:
            assert fams[name](m.predict(places(a, r, ln))) is member, (name, a, r, ln)


def _swapped(mapping: dict, a: str = "cpu:0", b: str = "cpu:1") -> dict:
    swap = {a: b, b: a}
    return {g: Place(p.backend, swap.get(p.device, p.device)) for g, p in mapping.items()}


def test_a_swap_of_the_cpu_devices_is_listed_once_and_predicts_the_same():
    m = Model(SHAPES, toy_sheets(), {"jax": PROFILE, "native": NATIVE}, host_costs={"python": HOST})
    maps = enumerate_mappings(m, ["cpu:0", "cpu:1", "gpu"])
    texts = [str(sorted(x.items())) for x in maps]
    assert len(set(texts)) == len(texts)
    twins = [_swapped(x) for x in maps]
    pairs = list(zip(maps, twins, strict=True))
    assert not any(str(sorted(t.items())) in set(texts) for x, t in pairs if t != x)
    both = [x for x in maps if {p.device for p in x.values()} >= {"cpu:0", "cpu:1"}]
    assert both  # a split over the two CPU devices is still a design point
    for x, twin in pairs:  # the dropped twin is the same design point
        if get(x["replay"].backend).host:
            continue  # a host backend has no twin: it stays on the host process's device
        assert m.predict(twin).trained_samples_per_s == m.predict(x).trained_samples_per_s
    only_second = enumerate_mappings(m, ["cpu:1", "gpu"])
    assert any(p.device == "cpu:1" for x in only_second for p in x.values())

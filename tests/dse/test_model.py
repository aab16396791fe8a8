"""The performance model and the search, on toy device sheets with answers worked out by hand
(the devices' own models: test_model_devices.py; the shapes it is given: test_model_inputs.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# the toy model; test_search.py, test_build.py and the DSE's other tests import it from here
from toy_model import NATIVE, PROFILE, SHAPES, US, model, places, stats, toy_sheets

from drlhet.dse.baselines import baselines
from drlhet.dse.model import Model, Place, Shapes
from drlhet.dse.pipelined import in_program
from drlhet.dse.search import enumerate_mappings, expand_devices, search


def test_fused_is_the_sum_of_compute_times():
    p = model().predict(places("jax@cpu:0", "jax@cpu:0", "jax@cpu:0"))
    # actors + insert + S (sample + train + update) = 10 + 20 + 2 (30 + 100 + 20) = 330 us
    assert p.bottleneck == "fused" and p.basis == "profiled"
    assert p.iteration_s == pytest.approx(330 * US)
    assert p.trained_samples_per_s == pytest.approx(2 * 100 / (330 * US))
    assert p.env_steps_per_s == pytest.approx(4 / (330 * US))
    native = model().predict(places("jax@cpu:0", "native@cpu:0", "jax@cpu:0"))
    assert native.iteration_s == pytest.approx((10 + 20 + 2 * (10 + 100 + 5)) * US)


def test_strict_chain_on_two_cpu_devices():
    p = model().predict(places("jax@cpu:0", "jax@cpu:1", "jax@cpu:1"), delay=0)
    # each stage waits for its input: latencies 70 + 100 + 2 x 220 + 1 x 90 + 60 = 760;
    # hops: transitions 5 + params 60
    assert p.bottleneck == "chain"
    assert p.iteration_s == pytest.approx(825 * US)
    q = model().predict(places("jax@cpu:0", "jax@cpu:1", "jax@cpu:0"), delay=0)
    # hops: transitions 5 + 2 x batch 15 + 2 x priorities 5, actors and learner share cpu:0
    assert q.iteration_s == pytest.approx((760 + 5 + 30 + 10) * US)


def test_relaxed_is_the_slowest_resource():
    m = model(host_driven=True)  # the host-driven loops (CPU splits run channels by default)
    two = places("jax@cpu:0", "jax@cpu:1", "jax@cpu:1")
    # 1 <= k < S on CPU devices only: the per-iteration host loop runs as the strict chain
    # (its thread's work does not overlap the compute), whether or not the pipeline is host-driven
    for mm in (m, model()):
        p = mm.predict(two, delay=1)
        assert p.bottleneck == "chain" and p.iteration_s == pytest.approx(825 * US)
    # k >= S: the threaded pipeline, U = max(1, k // (2 S)) iterations per call, lead
    # floor(k / (U S)) = 2 calls. Per iteration: dispatch (call - compute) / U: actors 40, replay
    # 80 - 20 - 30 = 30, learner 100; hops / U: transitions 5 (actors), params 60 (learner);
    # compute: actors 10 on cpu:0, replay 20 + 2 (30 + 20) = 120 and learner 200 on cpu:1;
    # one thread per device: replay and learner share cpu:1's
    for k, u in ((2, 1), (4, 1), (8, 2)):
        p = m.predict(two, delay=k)
        assert p.terms["busy cpu:1"] == pytest.approx(320 * US)
        assert p.terms["busy thread replay+learner"] == pytest.approx((30 + 160) / u * US)
        assert p.terms["busy host"] == pytest.approx(235 / u * US)
        cores = 330 / 2 + 235 / u  # the host's work does not overlap the compute
        assert p.terms["busy cpu cores"] == pytest.approx(cores * US)
        lead = 1 if k == 2 else 2  # k = 2 = S: the replay waits for the learner's last call
        actors, replay, learner = 10 + 45 / u, 120 + 30 / u, 200 + 160 / u
        # replay call c waits for learner call c - lead, actors call c for learner call c - 2
        cycle = max((replay + learner) / lead, (actors + replay + learner) / 2)
        assert p.terms["busy dependency cycle"] == pytest.approx(cycle * US)
        assert p.iteration_s == pytest.approx(max(320, cycle, cores) * US)
    # an accelerator runs on its own: the host thread only dispatches it. A slow GPU learner
    # (1 GFLOP/s: 2 x 5 x 100 x 1000 FLOP = 1 ms a step) is the bottleneck: per step 10 us
    # dispatch + 34 launches of 1 us + 1000 us
    sheets = toy_sheets()
    sheets["gpu"]["values"]["fp32_tflops"]["value"] = 1e-3
    slow_gpu = Model(SHAPES, sheets, {"jax": PROFILE, "native": NATIVE}, cpu_cores=2)
    gpu_learner = places("jax@cpu:0", "native@cpu:0", "jax@gpu")
    # 1 <= k < S with an accelerator: the per-iteration host loop's slowest resource
    p = slow_gpu.predict(gpu_learner, delay=1)
    assert p.bottleneck == "gpu"
    assert p.iteration_s == pytest.approx(2 * (10 + 34 + 1000) * US, rel=1e-3)
    # host thread: actors 50 + replay 80 + 70 + 40 + 2 GPU dispatches of 10 us = 260 us
    assert p.terms["busy host thread"] == pytest.approx(260 * US)
    # a slow link (0.1 GB/s, 2 us) is the bottleneck: 2 batches (2 + 100) + 2 priorities (2 + 10)
    # + params (2 + 1000) = 1230 us
    sheets = toy_sheets()
    sheets["link"]["values"]["bw_gbs"]["value"] = 0.1
    slow_link = Model(SHAPES, sheets, {"jax": PROFILE, "native": NATIVE}, cpu_cores=2)
    p = slow_link.predict(gpu_learner, delay=1)
    assert p.bottleneck == "link cpu:0-gpu"
    assert p.iteration_s == pytest.approx(1230 * US)


def test_gpu_learner_is_launch_bound_and_pays_the_link():
    m = model()
    # train on the toy GPU: (12 x layers + 10) launches of 1 us, FLOPs and bytes ~free
    assert m.compute("learner", Place("jax", "gpu"))["train"] == pytest.approx(34 * US, rel=1e-6)
    assert m.call("learner", Place("jax", "gpu")) == pytest.approx(44 * US, rel=1e-6)
    # a hop host <-> gpu: 2 us + bytes / 1 GB/s
    assert m.hop("batch", "cpu:0", "gpu") == pytest.approx(2 * US + 10_000 / 1e9)
    # gpu <-> fpga goes through the host: two links
    assert m.hop("batch", "gpu", "fpga") == pytest.approx(2 * (2 * US + 10_000 / 1e9))
    p = m.predict(places("jax@cpu:0", "native@cpu:0", "jax@gpu"), delay=0)
    assert p.basis == "modeled (sheet)" and not p.runnable
    chain = 70 + 100 + 2 * 44 + 90 + 60  # cpu latencies + gpu learner calls
    hops = 2 * (2 + 10) + 2 * (2 + 1) + (2 + 100)  # batch, priorities, params (us)
    assert p.iteration_s == pytest.approx((chain + hops) * US, rel=1e-6)


def test_a_pipelined_call_moves_all_of_its_batches_over_the_link():
    # U = k // 2S iterations a call, P = U S batches packed in one payload: one latency, P
    # times the bytes (one batch's bytes were charged, P-fold too little at any k)
    m = model()
    for delay in (4, 16, 64):
        u, n = delay // (2 * SHAPES.sgd_steps), SHAPES.sgd_steps
        terms = m.predict(places("jax@cpu:0", "native@cpu:0", "jax@gpu"), delay=delay).terms
        # the learner's thread: its dispatch (the call less the compute) and its outgoing hops
        # (the toy link: 2 us + bytes / 1 GB/s; priorities 1,000 bytes, params 100,000)
        dispatch = (44 - 34) / u
        hops = ((2 + u * n * 1) + (2 + 100)) / u
        assert terms["busy thread learner"] == pytest.approx((dispatch + hops) * US, rel=1e-6)
        # and the replay's: at least S batches' bytes an iteration cross the link, whatever k
        assert terms["busy thread actors+replay"] >= n * 10_000 / 1e9


def test_infeasible_mappings_say_why():
    m = model()
    assert "FPGA" in m.infeasible(places("jax@fpga", "fpga@fpga", "fpga@fpga"))
    assert "CPU only" in m.infeasible(places("jax@cpu:0", "native@gpu", "jax@cpu:0"))
    # a replay backend's kernels that cannot hold the run's tree (its registry entry's accepts)
    wide = Model(Shapes(**{**SHAPES.__dict__, "branching": 300}), toy_sheets(), {"jax": PROFILE})
    assert "native backend supports K <= 256, got 300" in wide.infeasible(
        places("jax@cpu:0", "native@cpu:0", "jax@cpu:0")
    )
    assert "cuda backend supports K <= 256" in wide.infeasible(
        places("jax@cpu:0", "cuda@gpu", "jax@cpu:0")
    )
    assert wide.infeasible(places("jax@cpu:0", "jax@cpu:0", "jax@cpu:0")) == ""
    with pytest.raises(ValueError, match="no sheet"):
        m.kind("tpu")


def test_search_ranks_and_knows_the_bottleneck_mapping():
    host = {"replay_in": 500 * US, "replay_next": 500 * US, "apply": 100 * US}
    m = model(host_costs={"python": host})
    devs = expand_devices("cpu,gpu,fpga", cpu_devices=2)
    assert devs == ["cpu:0", "cpu:1", "gpu", "fpga"]
    maps = enumerate_mappings(m, devs)
    # actors: cpu:0, cpu:1, gpu; replay: 2 x (jax, native), gpu (jax, cuda), fpga, python;
    # learner: 4; 3 * 8 * 4 = 96 placements, of which 39 only swap cpu:0 and cpu:1 of another
    # (no host replay and cpu:1 the first CPU device used: actors on cpu:1, 7 * 4; actors on the
    # gpu and the replay on cpu:1, 2 * 4; actors and replay off the CPUs, the learner on cpu:1, 3)
    assert len(maps) == 3 * 8 * 4 - (7 * 4 + 2 * 4 + 3)
    preds = search(m, devs, 0, present=["cpu:0", "cpu:1"], backends_here=["jax", "native"])
    rates = [p.trained_samples_per_s for p in preds]
    assert rates == sorted(rates, reverse=True)
    runnable = [p for p in preds if p.runnable]
    assert {p.places["replay"].backend for p in runnable} == {"jax", "native"}
    assert all(p.basis == "profiled" for p in runnable)
    # by hand: the best runnable mapping is everything fused with the native replay on one device
    assert runnable[0].mapping_text() == "actors=jax@cpu:0,replay=native@cpu:0,learner=jax@cpu:0"
    base = baselines(preds, m)
    assert set(base) == {
        "all on CPU (jax)",
        "replay on CPU, learner on GPU",
        "all on GPU",
        "paper-style: Python replay",
    }
    assert base["paper-style: Python replay"].places["replay"].backend == "python"
    assert base["all on GPU"].places["replay"].device == "gpu"


def test_the_model_imports_no_jax_and_no_training_stack():
    # the packages (drlhet's by subpackage) that importing the pure model brings in
    code = (
        "import sys, drlhet.dse.model, drlhet.dse.shapes, drlhet.dse.devices\n"
        "print(sorted({'.'.join(m.split('.')[: 2 if m.startswith('drlhet.') else 1])"
        " for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(eval(out.stdout))
    jax_stack = {"jax", "jaxlib", "flax", "optax", "gymnax"}
    assert not loaded & jax_stack, loaded & jax_stack
    stack = {"drlhet.runtime", "drlhet.agents", "drlhet.envs", "drlhet.replay", "drlhet.cli"}
    assert not loaded & stack, loaded & stack


def test_pipeline_figures_measured_in_the_pipeline_replace_the_strict_loops():
    # with the pipeline's own host figures (drlhet.dse.profile_pipeline) the threads pay those
    # dispatches, and every CPU-to-CPU hop costs one put of a packed payload (8 us here)
    pipe = {
        "dispatch_actors": stats(30),
        "dispatch_replay": stats(25),
        "dispatch_learner": stats(20),
        "put": stats(8),
    }
    profiles = {b: {**p, "pipeline": pipe} for b, p in (("jax", PROFILE), ("native", NATIVE))}
    m = Model(SHAPES, toy_sheets(), profiles, cpu_cores=2, host_driven=True)
    two = places("jax@cpu:0", "jax@cpu:1", "jax@cpu:1")
    for k, u in ((4, 1), (8, 2)):
        p = m.predict(two, delay=k)
        # actors: dispatch 30 + transitions put 8; learner: 20 + params put 8 (priorities stay
        # on cpu:1); replay: 25 (its batches stay on cpu:1)
        assert p.terms["busy thread actors"] == pytest.approx(38 / u * US)
        assert p.terms["busy thread replay+learner"] == pytest.approx((25 + 28) / u * US)
        assert p.terms["busy host"] == pytest.approx(91 / u * US)
        assert p.terms["busy cpu cores"] == pytest.approx((330 / 2 + 91 / u) * US)
        assert p.iteration_s == pytest.approx(320 * US)  # cpu:1's compute


def test_in_program_channels_charge_no_host_thread_only_their_messages():
    # actors + replay on cpu:0, learner on cpu:1: in-program channels (drlhet.runtime
    # .channel_stages). Per iteration (k = 4, S = 2: U = 1, P = 2, lead 2): compute actors 10,
    # replay 120, learner 200; messages of 5 us: actors 2, replay and learner 2 + P = 4 each
    m = Model(SHAPES, toy_sheets(), {"jax": PROFILE, "native": NATIVE}, cpu_cores=2)
    two = places("jax@cpu:0", "jax@cpu:0", "jax@cpu:1")
    host = Model(SHAPES, toy_sheets(), {"jax": PROFILE}, cpu_cores=2, host_driven=True)
    assert in_program(m, two) and not in_program(host, two)
    p = m.predict(two, delay=4)
    assert "busy host" not in p.terms
    assert p.terms["busy thread actors+replay"] == pytest.approx((10 + 10 + 120 + 20) * US)
    assert p.terms["busy thread learner"] == pytest.approx(220 * US)
    assert p.terms["busy cpu cores"] == pytest.approx(380 / 2 * US)
    assert p.terms["busy dependency cycle"] == pytest.approx(max(360 / 2, 380 / 2) * US)
    assert p.bottleneck == "thread learner" and p.iteration_s == pytest.approx(220 * US)


def test_the_host_loop_pays_a_hop_between_cpu_devices_itself():
    # 1 <= k < S with a GPU learner: the host thread runs every CPU stage and every hop
    # between CPU devices (here the transitions' 5 us from cpu:1 to cpu:0), not the GPU's run
    p = model().predict(places("jax@cpu:1", "native@cpu:0", "jax@gpu"), delay=1)
    assert p.terms["busy host thread"] == pytest.approx((50 + 80 + 70 + 40 + 2 * 10 + 5) * US)
    assert p.terms["busy link cpu:0-cpu:1"] == pytest.approx(5 * US)

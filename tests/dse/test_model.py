"""The performance model and the search, on toy device sheets with answers worked out by hand."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

from drlhet.dse.baselines import baselines
from drlhet.dse.devices import learner_cycles, load_sheets, rmm_cycles
from drlhet.dse.model import Model, Place, Shapes
from drlhet.dse.pipelined import in_program
from drlhet.dse.search import enumerate_mappings, expand_devices, search

US = 1e-6


def stats(us: float) -> dict:
    return {"median": us * US, "min": us * US, "max": us * US}


SHAPES = Shapes(
    batch=100,
    capacity=4096,
    branching=16,
    num_envs=4,
    sgd_steps=2,
    levels=3,
    tree_bytes=4 * 4384,
    row_bytes=40,
    params=1000,
    macs_per_sample=1000,
    layers=2,
    bytes={"transitions": 1_000, "batch": 10_000, "priorities": 1_000, "params": 100_000},
    net=(4, 64, 64, 2),
)

# A CPU profile with round numbers (microseconds).
PROFILE = {
    "compute": {
        "actors": stats(10),
        "insert": stats(20),
        "sample": stats(30),
        "train": stats(100),
        "update": stats(20),
    },
    "call": {
        "actors": stats(50),
        "replay_in": stats(80),
        "replay_next": stats(70),
        "apply": stats(40),
        "learner": stats(200),
    },
    "latency": {  # each call waited for: call + 20 us here
        "actors": stats(70),
        "replay_in": stats(100),
        "replay_next": stats(90),
        "apply": stats(60),
        "learner": stats(220),
    },
    "transfer": {
        "transitions": stats(5),
        "batch": stats(15),
        "priorities": stats(5),
        "params": stats(60),
    },
}
NATIVE = {**PROFILE, "compute": {**PROFILE["compute"], "sample": stats(10), "update": stats(5)}}


def toy_sheets() -> dict:
    def v(x):
        return {"value": x, "source": "toy"}

    return {
        "gpu": {
            "name": "gpu",
            "kind": "gpu",
            "link": "link",
            "values": {
                "mem_bw_gbs": v(1e9),  # effectively infinite: launch-bound
                "mem_gb": v(1.0),
                "fp32_tflops": v(1e9),
                "launch_us": v(1.0),
                "dispatch_us": v(10.0),
                "random_access_efficiency": v(1.0),
                "compute_efficiency": v(1.0),
            },
        },
        "fpga": {
            "name": "fpga",
            "kind": "fpga",
            "link": "link",
            "values": {
                "clock_mhz": v(100),
                "dsp": v(20000),
                "sram_mb": v(1),
                "ddr_bw_gbs": v(1e9),
                "invocation_us": v(5.0),
                "ddr_gb": v(0.01),
            },
        },
        "link": {
            "name": "link",
            "kind": "link",
            "values": {"bw_gbs": v(1.0), "latency_us": v(2.0)},
        },
    }


def model(**kw) -> Model:
    return Model(SHAPES, toy_sheets(), {"jax": PROFILE, "native": NATIVE}, cpu_cores=2, **kw)


def places(a, r, ln):
    return {
        "actors": Place(*a.split("@")),
        "replay": Place(*r.split("@")),
        "learner": Place(*ln.split("@")),
    }


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


def test_fpga_replay_costs_the_modules_cycle_model():
    m = model()
    c = m.compute("replay", Place("fpga", "fpga"))
    mhz, rows = 100, 40 / 1e18  # toy clock; rows over the toy DDR: ~free

    def cycles(op, n, **kw):
        return rmm_cycles.cycles(op, 16, 4096, n, **kw) / (mhz * 1e6)

    assert c["sample"] == pytest.approx(cycles("sample", 100) + 100 * rows)
    assert c["update"] == pytest.approx(cycles("write", 100))
    assert c["insert"] == pytest.approx(cycles("write", 4) + 4 * rows)
    assert m.call("apply", Place("fpga", "fpga")) == pytest.approx(5 * US + c["update"])
    p = m.predict(places("jax@cpu:0", "fpga@fpga", "jax@cpu:0"))
    assert p.basis == "modeled (cycle model)"
    on_fpga = places("jax@cpu:0", "fpga@fpga", "fpga@fpga")
    assert m.predict(on_fpga).basis == "modeled (cycle model)"
    # learner: the learner module's cycle model at the toy's clock
    t = m.compute("learner", Place("fpga", "fpga"))["train"]
    assert t == pytest.approx(learner_cycles.dqn_step_cycles(4, (64, 64), 2, 100) / (mhz * 1e6))
    ddpg = Model(
        Shapes(**{**SHAPES.__dict__, "algo": "ddpg", "td3": True}), toy_sheets(), {"jax": PROFILE}
    )
    t = ddpg.compute("learner", Place("fpga", "fpga"))["train"]
    mean = learner_cycles.ddpg_mean_step_cycles(4, (64, 64), 2, 100, td3=True, policy_delay=2)
    assert t == pytest.approx(mean / (mhz * 1e6))
    for change, why in (
        ({"algo": "sac"}, "not 'sac'"),
        ({"algo": "ddpg", "net": (200, 64, 64, 60)}, "1..256 wide"),
        ({"net": (4, 512, 2)}, "1..256 wide"),
        ({"batch": 512}, "batches of 1..256"),
    ):
        shapes = Shapes(**{**SHAPES.__dict__, **change})
        assert why in Model(shapes, toy_sheets(), {"jax": PROFILE}).infeasible(on_fpga)


def test_fpga_leaves_beyond_on_chip_live_in_ddr_and_beyond_ddr_are_refused():
    def sized(capacity, branching=16):
        shapes = Shapes(**{**SHAPES.__dict__, "capacity": capacity, "branching": branching})
        return Model(shapes, toy_sheets(), {"jax": PROFILE})

    on_chip = sized(4096).compute("replay", Place("fpga", "fpga"))["update"]
    ddr = sized(1 << 17)  # 1 MiB of leaves: past the toy's 1 MB on chip, inside its 10 MB DDR
    assert ddr.infeasible(places("jax@cpu:0", "fpga@fpga", "jax@cpu:0")) == ""
    assert ddr.compute("replay", Place("fpga", "fpga"))["update"] > 10 * on_chip
    for capacity, branching, why in (
        (1 << 21, 16, "exceed the board's on-chip .* and DDR"),
        (4096, 2, "supports K in"),
        ((1 << 30) + 1, 64, "holds <= 1073741824 leaves"),
    ):
        p = sized(capacity, branching).predict(places("jax@cpu:0", "fpga@fpga", "jax@cpu:0"))
        assert math.isinf(p.iteration_s) and re.search(why, p.note), p.note


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


def test_shipped_sheets_give_every_value_a_source(tmp_path):
    sheets = load_sheets()
    assert {"h100", "a100", "u200", "u250", "pcie3", "pcie4"} <= set(sheets)
    for s in sheets.values():
        if s["kind"] != "link":
            assert s["link"] in sheets
        for name, v in s["values"].items():
            assert v["source"] and isinstance(v["value"], (int, float)), (s["name"], name)
    bad = {"name": "x", "kind": "gpu", "values": {"launch_us": {"value": 1}}}
    (tmp_path / "x.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="needs a value and a source"):
        load_sheets(tmp_path)
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_sheets(tmp_path)


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


@pytest.mark.parametrize("td3", [False, True])
def test_the_traced_shapes_count_every_networks_weights(monkeypatch, td3):
    # the critics are made with vmap (a leading [critics] axis on every leaf): their weight
    # matrices were skipped and their biases counted as layers (DDPG 4481 MACs, not 8768)
    import dataclasses

    from drlhet.dse import trace
    from drlhet.dse.key import ProfileKey

    real = trace.make_trainer

    def make_trainer(cfg):  # ProfileKey has no TD3 switch: trace the TD3 agent here
        return real(dataclasses.replace(cfg, ddpg=dataclasses.replace(cfg.ddpg, td3=td3)))

    monkeypatch.setattr(trace, "make_trainer", make_trainer)
    shapes = trace.shapes_of(ProfileKey(algo="ddpg", env="Pendulum-v1", hidden=(64, 64)))
    actor = 3 * 64 + 64 * 64 + 64 * 1  # Pendulum: 3 observations, 1 action
    critic = (3 + 1) * 64 + 64 * 64 + 64 * 1
    assert shapes.macs_per_sample == actor + (2 if td3 else 1) * critic
    assert shapes.layers == 6  # 3 of the actor, 3 batched products of the critics
    dqn = trace.shapes_of(ProfileKey(hidden=(64, 64)))  # CartPole: 4 observations, 2 actions
    assert dqn.macs_per_sample == 4 * 64 + 64 * 64 + 64 * 2 + 64  # and the dueling value head


@pytest.mark.parametrize("num_envs", [3, 32, 64])
def test_a_measured_mapping_runs_whole_iterations_per_chunk(monkeypatch, num_envs):
    # eval_every was the raw 2,000 env steps, refused for envs that do not divide it
    from drlhet.dse import measure
    from drlhet.dse.key import ProfileKey
    from drlhet.runtime.config import check, chunks_of

    seen = []

    def run(cfg, mapping):
        check(cfg)
        chunks_of(cfg)
        seen.append(cfg)
        return None, [{"trained_samples_per_s": 1.0, "env_steps_per_s": 2.0}] * 5

    monkeypatch.setattr(measure, "run", run)
    got = measure.measure_mapping(
        ProfileKey(num_envs=num_envs), "actors=cpu:0,replay=cpu:0,learner=cpu:0"
    )
    assert got["trained_samples_per_s"] == 1.0
    assert seen[0].eval_every % num_envs == 0 and seen[0].eval_every <= 2_000


def test_the_shipped_sheets_are_read_in_their_units():
    # a shape where the bytes and FLOPs weigh as much as the launches (the toy sheets make
    # them free: GB/s read as MB/s, or an efficiency left out, went unseen)
    from drlhet.dse.devices import MODELS

    sheets = load_sheets()
    s = Shapes(**{**SHAPES.__dict__, "batch": 65536})
    gpu, h100 = MODELS["gpu"], sheets["h100"]
    rand_bw, flops = 3350e9 * 0.25, 67e12 * 0.3  # GB/s x random-access eff., TFLOPS x eff.
    # sample: 3 levels + 4 kernels of 3 us; B x (3 levels x a 16 x 4 B row + a 40 B row)
    assert gpu.seconds("sample", h100, s) == pytest.approx(7 * 3e-6 + 65536 * 232 / rand_bw)
    # train: 12 x 2 + 10 kernels; 2 x 5 x B x 1000 MACs; 3 x 4 B x 1000 params at full bw
    train = 34 * 3e-6 + 10 * 65536 * 1000 / flops + 12 * 1000 / 3350e9
    assert gpu.seconds("train", h100, s) == pytest.approx(train)
    # update: 2 x 3 + 2 kernels; 2 x B x 3 levels x 64 B
    assert gpu.seconds("update", h100, s) == pytest.approx(8 * 3e-6 + 2 * 65536 * 192 / rand_bw)
    assert gpu.host_overhead(h100) == pytest.approx(25e-6)
    # the board: the module's cycles at 300 MHz, and the B sampled rows of 40 B at 77 GB/s
    fpga, u250 = MODELS["fpga"], sheets["u250"]
    cycles = rmm_cycles.cycles("sample", 16, 4096, 65536)
    sample = cycles / 300e6 + 65536 * 40 / 77e9
    assert fpga.seconds("sample", u250, s) == pytest.approx(sample)
    assert fpga.host_overhead(u250) == pytest.approx(10e-6)


def test_a_replay_that_a_device_cannot_hold_cannot_be_placed_there():
    def sized(capacity, row_bytes=40, sheets=None):
        shapes = Shapes(**{**SHAPES.__dict__, "capacity": capacity, "row_bytes": row_bytes})
        return Model(shapes, sheets or toy_sheets(), {"jax": PROFILE})

    # the toy GPU holds 1 GB: 26 M rows of 40 B do not fit (they were placed there)
    on_gpu = places("jax@cpu:0", "jax@gpu", "jax@cpu:0")
    assert sized(24_000_000).infeasible(on_gpu) == ""
    why = sized(26_000_000).infeasible(on_gpu)
    assert why == (
        "gpu: capacity 26000000: the replay's transitions and sum tree (1.0 GB) exceed its "
        "memory (1 GB)"
    )
    assert sized(26_000_000).infeasible(places("jax@cpu:0", "jax@cpu:0", "jax@gpu")) == ""
    # the toy board's 10 MB of DDR hold its leaves (2^17: 1 MB, past on chip) and 40 B rows,
    # not 80 B rows (the transitions it samples were not counted)
    on_fpga = places("jax@cpu:0", "fpga@fpga", "jax@cpu:0")
    assert sized(1 << 17).infeasible(on_fpga) == ""
    why = sized(1 << 17, 80).infeasible(on_fpga)
    assert re.search(r"transitions .* and leaves .* exceed the board's DDR \(0 GB\)", why)
    # the shipped sheets: CartPole's 44 B rows at the largest buffer a run takes (2^31 - 1)
    # overflow an 80 GB H100 and fit a 141 GB H200; 2^25 rows of a MinAtar transition (two
    # 10 x 10 x 4 float observations: 3,200 B) overflow a U250's 64 GB of DDR
    shipped = load_sheets()
    big = sized((1 << 31) - 1, 44, shipped)
    on_h100 = places("jax@cpu:0", "jax@h100", "jax@h100")
    assert "exceed its memory (80 GB)" in big.infeasible(on_h100)
    assert big.infeasible(places("jax@cpu:0", "jax@h200", "jax@cpu:0")) == ""
    on_u250 = places("jax@cpu:0", "fpga@u250", "jax@cpu:0")
    assert sized(1 << 25, 1600, shipped).infeasible(on_u250) == ""
    why = sized(1 << 25, 3200, shipped).infeasible(on_u250)
    assert why == (
        "u250: capacity 33554432: its transitions (107.4 GB) and leaves (0.3 GB) exceed the "
        "board's DDR (64 GB)"
    )


def test_the_host_loop_pays_a_hop_between_cpu_devices_itself():
    # 1 <= k < S with a GPU learner: the host thread runs every CPU stage and every hop
    # between CPU devices (here the transitions' 5 us from cpu:1 to cpu:0), not the GPU's run
    p = model().predict(places("jax@cpu:1", "native@cpu:0", "jax@gpu"), delay=1)
    assert p.terms["busy host thread"] == pytest.approx((50 + 80 + 70 + 40 + 2 * 10 + 5) * US)
    assert p.terms["busy link cpu:0-cpu:1"] == pytest.approx(5 * US)

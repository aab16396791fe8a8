"""The toy model the DSE's tests work out by hand: shapes, a CPU profile with round numbers, and
device sheets of a GPU, an FPGA and their link (test_model.py and the tests beside it)."""

from __future__ import annotations

from drlhet.dse.model import Model, Place, Shapes

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

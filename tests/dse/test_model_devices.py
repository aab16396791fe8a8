"""The performance model's devices: an FPGA replay's and learner's cycle models, the shipped
device sheets and the units they are read in, and what a device's memory can hold."""

from __future__ import annotations

import json
import math
import re

import pytest
from toy_model import PROFILE, SHAPES, US, model, places, toy_sheets

from drlhet.dse.devices import learner_cycles, load_sheets, rmm_cycles
from drlhet.dse.model import Model, Place, Shapes


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

    # learner: the learner module's cycle model at the toy's clock, and its driver's load and
    # store: two more invocations (5 us), the memories over the link (2 us + 1 GB/s) each way,
    # and the module's loops packing them into rows of 64 (a row 4 cycles, a layer's loop 64
    # cycles of AXI latency and 2 of entry: 4 rows + 63 a layer)
    def driver(floats, rows):
        return 2 * (5 * US + 2 * US + 4 * 4 * floats / 1e9 + rows / (mhz * 1e6))

    # DQN 4-64-64 with dueling heads 1 and 2: 320 + 4160 + 65 + 130 parameters; rows 5, 65,
    # 65, 65 (83 + 3 x 323 cycles) in each of the four memories
    t = m.compute("learner", Place("fpga", "fpga"))["train"]
    step = learner_cycles.dqn_step_cycles(4, (64, 64), 2, 100) / (mhz * 1e6)
    assert t == pytest.approx(step + driver(4675, 4 * 1052))
    resident = toy_sheets()
    resident["fpga"]["values"]["learner_memories_resident"] = {"value": 1, "source": "toy"}
    kept = Model(SHAPES, resident, {"jax": PROFILE}).compute("learner", Place("fpga", "fpga"))
    assert kept["train"] == pytest.approx(step)
    ddpg = Model(
        Shapes(**{**SHAPES.__dict__, "algo": "ddpg", "td3": True}), toy_sheets(), {"jax": PROFILE}
    )
    t = ddpg.compute("learner", Place("fpga", "fpga"))["train"]
    mean = learner_cycles.ddpg_mean_step_cycles(4, (64, 64), 2, 100, td3=True, policy_delay=2)
    # the actor 4-64-64-2 (4610; rows 5, 65, 65: 729 cycles) and two critics 6-64-64-1 (4673
    # each; rows 7, 65, 65: 737 cycles), four memories each
    assert t == pytest.approx(mean / (mhz * 1e6) + driver(4610 + 2 * 4673, 4 * (729 + 2 * 737)))
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


def test_the_shipped_sheets_are_read_in_their_units():
    # a shape where the bytes and FLOPs weigh as much as the launches (the toy sheets make
    # them free: GB/s read as MB/s, or an efficiency left out, went unseen)
    from drlhet.dse.devices import MODELS

    sheets = load_sheets()
    s = Shapes(**{**SHAPES.__dict__, "batch": 65536})
    gpu, h100, pcie = MODELS["gpu"], sheets["h100"], sheets["pcie5"]
    rand_bw, flops = 3350e9 * 0.25, 67e12 * 0.3  # GB/s x random-access eff., TFLOPS x eff.
    # sample: 3 levels + 4 kernels of 3 us; B x (3 levels x a 16 x 4 B row + a 40 B row)
    assert gpu.seconds("sample", h100, s, pcie) == pytest.approx(7 * 3e-6 + 65536 * 232 / rand_bw)
    # train: 12 x 2 + 10 kernels; 2 x 5 x B x 1000 MACs; 3 x 4 B x 1000 params at full bw
    train = 34 * 3e-6 + 10 * 65536 * 1000 / flops + 12 * 1000 / 3350e9
    assert gpu.seconds("train", h100, s, pcie) == pytest.approx(train)
    # update: 2 x 3 + 2 kernels; 2 x B x 3 levels x 64 B
    assert gpu.seconds("update", h100, s, pcie) == pytest.approx(
        8 * 3e-6 + 2 * 65536 * 192 / rand_bw
    )
    assert gpu.host_overhead(h100) == pytest.approx(25e-6)
    # the board: the module's cycles at 300 MHz, and the B sampled rows of 40 B at 77 GB/s
    fpga, u250 = MODELS["fpga"], sheets["u250"]
    cycles = rmm_cycles.cycles("sample", 16, 4096, 65536)
    sample = cycles / 300e6 + 65536 * 40 / 77e9
    assert fpga.seconds("sample", u250, s, sheets["pcie3"]) == pytest.approx(sample)
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

"""The replay module's g++ testbench (hls/rmm/rmm_tb.cpp): the synthesized top (rmm_top.cpp, as
Vitis' C-simulation runs it) against the C-simulation's path, word for word, for several K and
capacities; and its stepped cycle count against the closed-form cycle model
(`drlhet.dse.devices.rmm_cycles`). The ap_types headers come from the hls4ml wheel (a test
dependency), the compiler is the one that builds the kernels."""

from __future__ import annotations

import subprocess

import pytest

from drlhet.dse.devices import rmm_cycles
from drlhet.dse.devices.rmm_cycles import Stage, Timing
from drlhet.dse.devices.rmm_testbench import build, stepped_cycles

COMMANDS = [  # (op, skipped %, stratified, leaves)
    ("write", 0, True, "on-chip"),
    ("write", 30, True, "on-chip"),
    ("sample", 0, True, "on-chip"),
    ("sample", 0, False, "on-chip"),
    ("read", 0, True, "on-chip"),
    ("write", 10, True, "ddr"),
    ("sample", 0, True, "ddr"),
]


@pytest.mark.parametrize(
    "k, capacity", [(4, 12_288), (16, 100_003), (64, 1 << 20), (32, 1 << 22), (8, 3)]
)
def test_the_synthesized_top_equals_the_c_simulation(tmp_path, k, capacity):
    exe = build(tmp_path, k, capacity)
    for seed in (1, 2):
        run = subprocess.run([str(exe), "150", str(seed)], capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout.startswith(f"PASS K={k} capacity={capacity}")


@pytest.mark.parametrize("k", [16, 64])
def test_the_cycle_model_agrees_with_the_stepped_count(tmp_path, k):
    """Within 5% for K 16 and 64, B 32, 256 and 4096, at 2^20 leaves: every command, skipped
    writes, i.i.d. and stratified samples, leaves on chip and in DDR."""
    capacity = 1 << 20
    exe = build(tmp_path, k, capacity)
    for b in (32, 256, 4096):
        for op, skipped, stratified, leaves in COMMANDS:
            kw = {"stratified": stratified, "leaves": leaves}
            chain = rmm_cycles.stages(op, k, capacity, b, **kw)
            stepped, items = stepped_cycles(exe, op, b, chain, skipped_percent=skipped)
            assert (items < b) == (skipped > 0 and op == "write")
            model = rmm_cycles.cycles(op, k, capacity, b, kept=items, **kw)
            assert abs(model / stepped - 1) <= 0.05, (op, b, leaves, model, stepped)


def test_the_stepped_count_sees_the_stages(tmp_path):
    """The stepped count follows the bottleneck, the fill and the FIFOs: a slower stage, a
    deeper one, or a FIFO hop each move it as the closed form says; a wrong table is refused."""
    exe = build(tmp_path, 16, 4096)
    t = Timing()
    chain = rmm_cycles.stages("sample", 16, 4096, 1000)
    base, _ = stepped_cycles(exe, "sample", 1000, chain)
    assert base == rmm_cycles.cycles("sample", 16, 4096, 1000)
    slow = [chain[0], Stage("level 0", 7, chain[1].depth, 1001, 1001), *chain[2:]]
    assert stepped_cycles(exe, "sample", 1000, slow)[0] == base + (7 - 3) * 1000
    deep = [chain[0]._replace(depth=chain[0].depth + 500), *chain[1:]]
    assert stepped_cycles(exe, "sample", 1000, deep)[0] == base + 500
    assert base > t.axi_read + t.axi_write + 3 * 1000
    with pytest.raises(RuntimeError, match="'ii depth' pairs"):
        stepped_cycles(exe, "sample", 1000, chain[:-1])

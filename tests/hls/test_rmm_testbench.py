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
from drlhet.dse.devices.rmm_testbench import RMM_DIR, build, stepped_cycles

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


def test_the_stepped_count_takes_fronts_items_from_the_code(tmp_path):
    """Which of Front's iterations pass an item on is what the command, run through the design,
    recorded (rmm_top.h's TraceFrontItem), not a test written again in the testbench: a planted
    Front that drops every other write moves the count's items, which the testbench's own copy
    of WriteFrontItem's test (until 2026-11-30) would not have seen."""
    import shutil

    sources = tmp_path / "rmm"
    shutil.copytree(RMM_DIR, sources)
    top = sources / "rmm_top.cpp"
    kept = "const bool kept = WriteFrontItem("
    assert kept in top.read_text()
    top.write_text(
        top.read_text().replace(kept, "const bool kept = (j % 2 == 0) && WriteFrontItem(")
    )
    chain = rmm_cycles.stages("write", 16, 4096, 1000)
    _, items = stepped_cycles(build(tmp_path, 16, 4096), "write", 1000, chain)
    (tmp_path / "planted").mkdir()
    planted = build(tmp_path / "planted", 16, 4096, sources=sources)
    _, planted_items = stepped_cycles(planted, "write", 1000, chain)
    assert items == 1000 and planted_items == 500


def test_the_testbench_builds_apart_from_the_top_as_vitis_compiles_it(tmp_path):
    """run_hls.tcl compiles rmm_tb.cpp with RMM_TB_INCLUDES_TOP=0 and the top apart (two
    translation units): the testbench's declarations come from rmm_top.h alone."""
    import shutil

    from drlhet.dse.devices.rmm_testbench import ap_types

    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx, "no C++ compiler, which `make test` needs for the kernels anyway"
    flags = ["-std=c++17", "-O1", "-w", f"-I{RMM_DIR}", "-isystem", str(ap_types())]
    flags.append("-DRMM_CAPACITY=100003")
    objs = []
    for name, extra in (("rmm_top", []), ("rmm_tb", ["-DRMM_TB_INCLUDES_TOP=0"])):
        obj = tmp_path / f"{name}.o"
        cmd = [cxx, *flags, *extra, "-c", str(RMM_DIR / f"{name}.cpp"), "-o", str(obj)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        objs.append(str(obj))
    exe = tmp_path / "csim"
    subprocess.run([cxx, *objs, "-o", str(exe)], check=True, capture_output=True, text=True)
    done = subprocess.run([str(exe), "40", "3"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("PASS"), done.stdout + done.stderr

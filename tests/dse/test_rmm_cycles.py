"""The FPGA replay module's cycle model (`drlhet.dse.devices.rmm_cycles`): its geometry equals
the tree's, its costs follow the design's loops, and where the leaves live follows the board's
memories. (Its agreement with the testbench's stepped count: tests/hls.)"""

from __future__ import annotations

import pytest

from drlhet.backends import rmm_spec
from drlhet.dse.devices import load_sheets, rmm_cycles
from drlhet.replay.fixed_point import level_bits
from drlhet.replay.sum_tree import layout


@pytest.mark.parametrize("k", rmm_cycles.BRANCHING)
@pytest.mark.parametrize("capacity", [1, 3, 12_288, 100_003, 1 << 20, (1 << 22) + 1])
def test_the_geometry_is_the_trees(k, capacity):
    lay = layout(capacity, k)
    assert rmm_cycles.depth_of(capacity, k) == lay.depth
    leaves, inner = rmm_cycles.memory_bytes(capacity, k)
    assert leaves == 2 * 4 * lay.widths[-1]
    bits = level_bits(capacity, k)
    assert inner == sum(lay.widths[lv] * bits[lv] // 8 for lv in range(1, lay.depth))


def test_costs_follow_the_loops():
    t = rmm_cycles.Timing()
    cyc = rmm_cycles.cycles
    # a batch streams at the slowest loop's II: the levels' read-modify-write (3)
    assert cyc("sample", 16, 1 << 20, 4096) - cyc("sample", 16, 1 << 20, 256) == 3 * 3840
    assert cyc("write", 16, 1 << 20, 4096) - cyc("write", 16, 1 << 20, 256) == 3 * 3840
    # a stratified target pays its add and divider over an i.i.d. one
    strat, iid = cyc("sample", 64, 1 << 20, 256), cyc("sample", 64, 1 << 20, 256, stratified=False)
    assert strat - iid == t.add + 64 * t.div_per_bit
    # one more level costs one level's depth and a FIFO hop
    deeper = cyc("sample", 16, (1 << 20) + 1, 256) - cyc("sample", 16, 1 << 20, 256)
    assert deeper == rmm_cycles.stages("sample", 16, 1 << 20, 256)[1].depth + 1
    # skipped writes still take the front's iterations; fewer items go down
    assert cyc("write", 16, 4096, 256, kept=10) == cyc("write", 16, 4096, 256)
    assert rmm_cycles.stages("write", 16, 4096, 256, kept=10)[1].iterations == 11
    # leaves in DDR: a write's front waits for its read-modify-write of the leaf copy
    ddr = cyc("write", 16, 4096, 256, leaves="ddr")
    assert ddr > 256 * t.ddr_latency > 10 * cyc("write", 16, 4096, 256)
    assert rmm_cycles.seconds("read", 16, 4096, 300, 300.0) == cyc("read", 16, 4096, 300) / 3e8
    with pytest.raises(ValueError, match="op must be one of"):
        cyc("update", 16, 4096, 1)


def test_where_the_leaves_live_on_a_u250():
    sheet = load_sheets()["u250"]["values"]
    sram, ddr = sheet["sram_mb"]["value"] * 1e6, sheet["ddr_gb"]["value"] * 1e9
    # counted in bytes, 2^22 fits the 54 MB; counted in URAM blocks as the top binds them
    # (two leaves a 72-bit row: the Front's table 512 blocks, the last level's K / 2 banks 512,
    # the inner levels 64 + 4 x 16) it fits the U250's 1,280 too; 2^23 (2,240) does not, and
    # nor does 2^22 at K 4 (its inner levels take 364)
    assert rmm_cycles.placement(1 << 22, 16, sram, ddr) == "on-chip"
    uram = sheet["uram_blocks"]["value"]
    assert uram == 1280 and rmm_spec.uram_blocks(1 << 22, 16) == (1024, 128)
    assert rmm_spec.uram_blocks(1 << 23, 16) == (2048, 192)
    assert rmm_spec.uram_blocks(1 << 22, 4) == (1024, 364)
    assert rmm_cycles.placement(1 << 22, 16, sram, ddr, uram) == "on-chip"
    assert rmm_cycles.placement(1 << 23, 16, sram, ddr, uram) == "ddr"
    assert rmm_cycles.placement(1 << 22, 4, sram, ddr, uram) == "ddr"
    # each bank takes a block however short: 50,000 leaves, 8 banks of 3,125 rows
    assert rmm_spec.uram_blocks(50_000, 16) == (7 + 8, 3 * 16)
    with pytest.raises(ValueError, match=r"inner nodes \(2,756 URAM blocks\) exceed .*1,280"):
        rmm_cycles.placement(1 << 25, 4, sram, ddr, uram)
    assert rmm_cycles.placement(1 << 23, 16, sram, ddr) == "ddr"
    with pytest.raises(ValueError, match="inner nodes .* exceed the board's on-chip"):
        rmm_cycles.placement(1 << 31, 16, sram, ddr)
    with pytest.raises(ValueError, match="leaves .* exceed the board's on-chip .* and DDR"):
        rmm_cycles.placement(1 << 23, 16, sram, 1e6)

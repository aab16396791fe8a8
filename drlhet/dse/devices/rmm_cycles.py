"""The cycle model of the FPGA replay module (``hls/rmm/rmm_top.cpp``): cycles per command.

docs/design.md section 3 ("The module's cycle model"). The module is one dataflow region,
``front -> level 0 -> ... -> level D-1 -> back``, each stage a loop pipelined at an initiation
interval (II) with a pipeline depth, joined by FIFOs; a command streams its items (a write's
kept entries, a sample's draws, a read's slots) and one end item through the chain. For a chain
of pipelines the last item leaves at (max-plus over the stages)

    cycles = axi_read + sum(depth_s) + (stages - 1) + max_s ii_s * (iterations_s - 1) + axi_write

where ``iterations_s`` counts the loop iterations of stage s (the front iterates every entry,
skipped writes included; the others see the items and the end item), the ``stages - 1`` are the
FIFO hops, and the AXI terms are the first beat of the input burst and the response of the last
output write. The testbench checks this closed form against a clock-by-clock stepping of the
same stages with their FIFOs (``hls/rmm/rmm_tb.cpp --cycles``; tests/hls).

The stage figures come from the design's loops (`Timing`, each with its reason): the front reads
two 32-bit words per write or sample entry through one AXI port (II 2); a level that adds to
its nodes reads, adds and writes one memory in a loop-carried dependence (II = read latency +
add); the last level only stores leaves and reads children (II 1); the back writes two words per
drawn or read item (II 2). Where the leaves do not fit on chip they live in the board's DDR
(`placement`), which lengthens the last level and the front's leaf table by the DDR latency.
A figure from this model is *modeled (cycle model)*, never measured: no board ran it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

from drlhet.backends.rmm_spec import (
    BRANCHING,
    DDR,
    MAX_CAPACITY,
    ON_CHIP,
    depth_of,
    memory_bytes,
    placement,
)

__all__ = [
    "BRANCHING",
    "MAX_CAPACITY",
    "OPS",
    "Timing",
    "Stage",
    "depth_of",
    "memory_bytes",
    "placement",
    "stages",
    "cycles",
    "seconds",
]

OPS = ("write", "sample", "read")
"""The module's commands (host protocol ``hls/rmm/rmm.h``)."""


@dataclasses.dataclass(frozen=True)
class Timing:
    """Cycle figures of the design's operators at the kernel clock (300 MHz on an Alveo).

    Attributes:
      axi_read: cycles to the first beat of an m_axi burst read (Vitis HLS's default ``latency``
        of an m_axi interface is 64).
      axi_write: cycles from the last beat of an m_axi write to its response (as above).
      port_words: 32-bit words an m_axi port moves per cycle (the design's ports are 32 bits).
      ram_read: cycles of an on-chip (URAM) read, output register included.
      add: cycles of one 64-bit add or subtract.
      fmul: cycles of the float32 multiply by 2^F (Vitis's fmul core at 300 MHz).
      fround: cycles of the round-to-nearest-even and the range checks of `Quantize`.
      mul64: cycles of the 64 x 64 -> 128-bit product of a target (cascaded DSP48s).
      div_per_bit: cycles per quotient bit of the stratified target's divider (a pipelined
        restoring divider; the quotient is < 2^64).
      select: cycles of a descent step's compare, select and subtract after the prefix sums.
      ddr_latency: cycles of a random DDR4 access through an m_axi port (~330 ns; assumption).
      ddr_port_bits: width of the DDR port the leaf level reads its K children through.
    """

    axi_read: int = 64
    axi_write: int = 64
    port_words: int = 1
    ram_read: int = 2
    add: int = 1
    fmul: int = 4
    fround: int = 3
    mul64: int = 6
    div_per_bit: int = 1
    select: int = 2
    ddr_latency: int = 100
    ddr_port_bits: int = 512


class Stage(NamedTuple):
    """One dataflow stage of a command: its loop's II, its pipeline depth (cycles from an
    iteration's start to its FIFO write) and its loop iterations; ``emits`` is the number of
    items it passes on (the front's skipped writes emit none)."""

    name: str
    ii: int
    depth: int
    iterations: int
    emits: int


def _front(op: str, batch: int, kept: int, stratified: bool, leaves: str, t: Timing) -> Stage:
    words = 1 if op == "read" else 2
    ii = -(-words // t.port_words)
    if op == "write":
        table = t.ram_read if leaves == ON_CHIP else t.ddr_latency
        depth = t.fmul + t.fround + table + 2 * t.add
        ii = max(ii, table + t.add)  # the leaf table's read-modify-write (duplicates)
    elif op == "sample":
        depth = t.mul64 + (t.add + 64 * t.div_per_bit if stratified else 0)
    else:
        depth = t.add
    emits = kept if op == "write" else batch
    return Stage("front", ii, depth, batch + 1, emits + 1)


def _level(op: str, level: int, depth: int, k: int, items: int, leaves: str, t: Timing) -> Stage:
    last = level == depth - 1
    on_ddr = last and leaves == DDR
    read = t.ddr_latency if on_ddr else t.ram_read
    ii = t.ram_read + t.add  # the adds' read-modify-write on the level memory
    if last:  # the leaves, two a word: a write's store reads the word its sibling shares
        ii = t.ram_read + 1 if op == "write" else 1
    if on_ddr:
        ii = max(ii, -(-k * 32 // t.ddr_port_bits))  # K children through the DDR port
    prefix = math.ceil(math.log2(k)) * t.add  # the adder tree of the K prefix sums
    return Stage(f"level {level}", ii, read + prefix + t.select, items + 1, items + 1)


def stages(
    op: str,
    branching: int,
    capacity: int,
    batch: int,
    *,
    kept: int | None = None,
    stratified: bool = True,
    leaves: str = ON_CHIP,
    timing: Timing = Timing(),
) -> list[Stage]:
    """The stages one command runs through: front, one per level, back.

    Args:
      op: ``write``, ``sample`` or ``read``.
      branching, capacity: K and leaves of the module.
      batch: B, the command's entries.
      kept: a write's entries inside the capacity (default all of them).
      stratified: a sample's targets are stratified (the divider) or i.i.d.
      leaves: ``"on-chip"`` or ``"ddr"`` (`placement`).
    """
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    items = batch if kept is None or op != "write" else kept
    depth = depth_of(capacity, branching)
    front = _front(op, batch, items, stratified, leaves, timing)
    mid = [_level(op, lv, depth, branching, items, leaves, timing) for lv in range(depth)]
    back_ii = 0 if op == "write" else -(-2 // timing.port_words)
    back = Stage("back", max(back_ii, 1), timing.add, items + 1, 0)
    return [front, *mid, back]


def cycles(op: str, branching: int, capacity: int, batch: int, **kw: Any) -> int:
    """Cycles of one command (the closed form above); keywords as for `stages`."""
    timing = kw.get("timing") or Timing()
    chain = stages(op, branching, capacity, batch, **kw)
    fill = sum(s.depth for s in chain) + len(chain) - 1
    stream = max(s.ii * (s.iterations - 1) for s in chain)
    return timing.axi_read + fill + stream + timing.axi_write


def seconds(op: str, branching: int, capacity: int, batch: int, clock_mhz: float, **kw) -> float:
    """Seconds of one command at ``clock_mhz`` (`cycles`, whose keywords ``kw`` takes; the
    host's invocation excluded)."""
    return cycles(op, branching, capacity, batch, **kw) / (clock_mhz * 1e6)

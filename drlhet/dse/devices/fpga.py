"""Analytical cost of the loop's primitives on an FPGA board, from its sheet and the HLS design.

docs/design.md section 5: the sum tree is a pipeline with one stage per level and the batch
streamed at initiation interval 1, ``(levels x stage cycles + n - 1) / clock``, with rows read
from DDR; the tree must fit in on-chip SRAM. The learner costs its MACs over the DSPs (DSPs per
MAC, efficiency) plus a fill per layer. The host pays the sheet's ``invocation_us`` per call.
"""

from __future__ import annotations

from drlhet.dse.shapes import Shapes

__all__ = ["seconds", "host_overhead", "infeasible"]


def _v(sheet: dict, name: str) -> float:
    return float(sheet["values"][name]["value"])


def seconds(prim: str, sheet: dict, s: Shapes) -> float:
    """Seconds of one call of primitive ``prim`` (``insert``, ``sample``, ``update``,
    ``train``) on the board of ``sheet``."""
    clock = _v(sheet, "clock_mhz") * 1e6
    stage = _v(sheet, "tree_stage_cycles")
    ddr = _v(sheet, "ddr_bw_gbs") * 1e9
    depth = s.levels * stage
    if prim == "sample":
        return (depth + s.batch - 1) / clock + s.batch * s.row_bytes / ddr
    if prim == "update":
        return (depth + s.batch - 1) / clock
    if prim == "insert":
        return (depth + s.num_envs - 1) / clock + s.num_envs * s.row_bytes / ddr
    if prim == "train":
        macs = 5 * s.batch * s.macs_per_sample
        per_cycle = _v(sheet, "dsp") / _v(sheet, "dsp_per_mac")
        return (
            macs / (per_cycle * _v(sheet, "learner_efficiency") * clock)
            + (s.layers * 2 * 20) / clock
        )
    raise ValueError(f"{prim} does not run on an FPGA in this model")


def host_overhead(sheet: dict) -> float:
    """Seconds of the host thread per call of a stage on the board (its invocation)."""
    return _v(sheet, "invocation_us") * 1e-6


def infeasible(group: str, sheet: dict, s: Shapes) -> str:
    """Why ``group`` cannot run on this board (empty: it can): the replay's sum tree must fit
    in the on-chip SRAM."""
    if group == "replay":
        sram = _v(sheet, "sram_mb") * 1e6
        if s.tree_bytes > sram:
            return f"the sum tree ({s.tree_bytes / 1e6:.1f} MB) exceeds {sheet['name']} SRAM"
    return ""

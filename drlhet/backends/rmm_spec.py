"""What the FPGA replay module (``hls/rmm``) is built for: its K, its capacity range, its
memories and where they fit on a board; and the words of the protocol's info op, by which a
bitstream reports the K, capacity and F it was built with.

Pure (no JAX): the backend, the board drivers and the DSE's cycle model all read it.
"""

import math

__all__ = [
    "BRANCHING",
    "MAX_CAPACITY",
    "ON_CHIP",
    "DDR",
    "accepts",
    "depth_of",
    "memory_bytes",
    "uram_blocks",
    "URAM_ROWS",
    "placement",
    "INFO",
    "INFO_MAGIC",
    "INFO_WORDS",
    "PROTOCOL_VERSION",
]

BRANCHING = (4, 8, 16, 32, 64)
"""K the module is built for (one pipeline stage per level, K children read in one cycle)."""
MAX_CAPACITY = 1 << 30
"""Leaves the module takes: its state is `drlhet.replay.fixed_point`'s tree (int32 indices on
the host, a dropped write's index past the leaf row: `fixed_point.MAX_CAPACITY`)."""
ON_CHIP, DDR = "on-chip", "ddr"
"""Where the leaves live (`placement`)."""
INFO, PROTOCOL_VERSION, INFO_MAGIC, INFO_WORDS = 4, 1, 0x524D4D49, 6
"""The info op (``rmm.h``: kInfo, kProtocolVersion, kInfoMagic, kInfoWords): ``cmd = [4, 1, 0]``,
``in = [a nonce]``; ``out = [INFO_MAGIC, the nonce, PROTOCOL_VERSION, K, capacity, frac_bits]``.
A bitstream older than the op (protocol version 0) leaves ``out`` as it was."""


def accepts(capacity: int, branching: int) -> str:
    """Why the module cannot hold ``capacity`` leaves at K ``branching`` (empty: it can)."""
    if branching not in BRANCHING:
        return f"the FPGA replay module supports K in {BRANCHING}, got {branching}"
    if capacity > MAX_CAPACITY:
        return f"the FPGA replay module holds <= {MAX_CAPACITY} leaves, got {capacity}"
    return ""


def depth_of(capacity: int, branching: int) -> int:
    """Levels below the root (``LayoutOf`` in ``hls/rmm/rmm.h``): at least one."""
    depth, count = 0, capacity
    while count > 1 or depth == 0:
        count = -(-count // branching)
        depth += 1
    return depth


def _widths(capacity: int, branching: int) -> list[int]:
    """Slots of each level 0..depth (node counts rounded up to a multiple of K)."""
    counts, c = [capacity], capacity
    for _ in range(depth_of(capacity, branching)):
        c = -(-c // branching)
        counts.append(c)
    return [-(-c // branching) * branching for c in reversed(counts)]


def memory_bytes(capacity: int, branching: int) -> tuple[int, int]:
    """``(leaf bytes, inner bytes)`` of the module's memories: the leaves twice (the front's
    table and the last level, 32 bits each), the inner levels 1..D-1 at their widths of
    ``32 + (D - level) log2 K`` bits (at most 64)."""
    widths, depth = _widths(capacity, branching), depth_of(capacity, branching)
    step = int(math.log2(branching))
    inner = sum(widths[lv] * min(64, 32 + (depth - lv) * step) // 8 for lv in range(1, depth))
    return 2 * 4 * widths[depth], inner


URAM_ROWS = 4096
"""Rows of one UltraRAM block (4,096 x 72 bits: AMD UG573)."""


def uram_blocks(capacity: int, branching: int) -> tuple[int, int]:
    """``(leaf blocks, inner blocks)`` of UltraRAM the module's memories take as
    ``hls/rmm/rmm_top.cpp`` binds them: the Front's leaf table two leaves a 64-bit word (one
    72-bit row), the last level's leaves two siblings a word in K / 2 banks, every inner level
    1..D-1 in K banks, one node a row; each bank at least one block."""
    widths, depth = _widths(capacity, branching), depth_of(capacity, branching)

    def ceil(a: int, b: int) -> int:
        return -(-a // b)

    rows = ceil(widths[depth], branching)  # of each bank of the leaves' level
    leaves = ceil(widths[depth] // 2, URAM_ROWS) + branching // 2 * ceil(rows, URAM_ROWS)
    inner = sum(branching * ceil(widths[lv] // branching, URAM_ROWS) for lv in range(1, depth))
    return leaves, inner


def placement(
    capacity: int, branching: int, sram_bytes: float, ddr_bytes: float, uram: int | None = None
) -> str:
    """Where the leaves live: ``"on-chip"`` when every memory fits on chip, else ``"ddr"``
    (the inner levels stay on chip). On chip is ``uram`` UltraRAM blocks counted as the code
    lays the memories out (`uram_blocks`) when given, else ``sram_bytes`` of memory counted in
    bytes (`memory_bytes`).

    Raises:
      ValueError: the leaves do not fit in ``ddr_bytes`` either, or the inner levels not on
        chip.
    """
    leaves, inner = memory_bytes(capacity, branching)
    mib, what = 2**20, f"capacity {capacity} (K {branching})"
    if uram is not None:
        leaf_blocks, inner_blocks = uram_blocks(capacity, branching)
        if leaf_blocks + inner_blocks <= uram:
            return ON_CHIP
        fits, have = inner_blocks <= uram, f"{uram:,} URAM blocks"
        need = f"{inner_blocks:,} URAM blocks"
    else:
        if leaves + inner <= sram_bytes:
            return ON_CHIP
        fits, have = inner <= sram_bytes, f"{sram_bytes / mib:,.0f} MiB"
        need = f"{inner / mib:,.0f} MiB"
    if not fits:
        raise ValueError(
            f"{what}: its inner nodes ({need}) exceed the board's on-chip memory ({have})"
        )
    if leaves > ddr_bytes:
        raise ValueError(
            f"{what}: its leaves ({leaves / mib:,.0f} MiB) exceed the board's on-chip ({have}) "
            f"and DDR ({ddr_bytes / mib:,.0f} MiB) memory"
        )
    return DDR

"""What the FPGA replay module (``hls/rmm``) is built for: its K and its capacity range.

Pure (no JAX): the backend, the board drivers and the DSE's cycle model all read it.
"""

__all__ = ["BRANCHING", "MAX_CAPACITY"]

BRANCHING = (4, 8, 16, 32, 64)
"""K the module is built for (one pipeline stage per level, K children read in one cycle)."""
MAX_CAPACITY = 1 << 31
"""Leaves the module addresses (int32 indices on the host)."""

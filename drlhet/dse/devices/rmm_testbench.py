"""The replay module's g++ testbench (``hls/rmm/rmm_tb.cpp``), built and run from Python.

docs/design.md section 3. The testbench runs the synthesized top against the C-simulation's
path (function) and, in its ``--cycles`` mode, steps the dataflow stages of one command clock
by clock (``hls/rmm/cycles.h``): the count the cycle model (`drlhet.dse.devices.rmm_cycles`) is
checked against. It needs the repository's ``hls/`` sources, a C++17 compiler and the open
ap_types headers of the hls4ml wheel.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

from drlhet.backends.base import BackendUnavailable
from drlhet.dse.devices.rmm_cycles import Stage, Timing

__all__ = ["RMM_DIR", "ap_types", "build", "stepped_cycles"]

RMM_DIR = Path(__file__).resolve().parents[3] / "hls" / "rmm"


def ap_types() -> Path:
    """The folder of ``ap_int.h`` in the hls4ml wheel."""
    spec = importlib.util.find_spec("hls4ml")
    if spec is None or not spec.submodule_search_locations:
        raise BackendUnavailable("no hls4ml: its ap_types headers build the testbench")
    return Path(list(spec.submodule_search_locations)[0]) / "templates" / "vivado" / "ap_types"


def build(out: Path, branching: int, capacity: int, sources: Path = RMM_DIR) -> Path:
    """Compiles the testbench for ``RMM_K = branching``, ``RMM_CAPACITY = capacity`` into
    ``out``; returns the executable. ``sources``: the folder of the module's sources (default:
    the repository's).

    Raises:
      BackendUnavailable: no compiler, no hls4ml, or no ``hls/rmm`` sources (an installed
        wheel without the repository).
    """
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise BackendUnavailable("no C++ compiler (g++) for the testbench")
    if not (sources / "rmm_tb.cpp").is_file():
        raise BackendUnavailable(f"no HLS sources at {sources} (a repository checkout has them)")
    exe = Path(out) / f"rmm_tb_k{branching}_c{capacity}"
    cmd = [cxx, "-std=c++17", "-O2", "-w", f"-I{sources}", "-isystem", str(ap_types())]
    cmd += [f"-DRMM_K={branching}", f"-DRMM_CAPACITY={capacity}", str(sources / "rmm_tb.cpp")]
    subprocess.run([*cmd, "-o", str(exe)], check=True, capture_output=True, text=True)
    return exe


def stepped_cycles(
    exe: Path,
    op: str,
    batch: int,
    stages: list[Stage],
    timing: Timing | None = None,
    skipped_percent: int = 0,
    seed: int = 1,
) -> tuple[int, int]:
    """The testbench's stepped count of one ``op`` command of ``batch`` entries through
    ``stages`` (their II and depth; front, levels, back): ``(cycles, items)`` where ``items``
    is what went down the levels (a write's entries inside the capacity)."""
    timing = timing or Timing()
    table = "".join(f"{s.ii} {s.depth}\n" for s in stages)
    args = [op, batch, skipped_percent, seed, timing.axi_read, timing.axi_write]
    run = subprocess.run(
        [str(exe), "--cycles", *map(str, args)], input=table, capture_output=True, text=True
    )
    if run.returncode != 0 or not run.stdout.startswith("CYCLES"):
        raise RuntimeError(f"the testbench's cycle count failed: {run.stdout}{run.stderr}")
    words = run.stdout.split()
    return int(words[1]), int(words[3])

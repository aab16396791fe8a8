"""The learner module's g++ testbench (``hls/learner/learner_tb.cpp``), built and run from Python.

docs/design.md section 3. Its ``--cycles`` mode steps the loops of one DQN learner step
iteration by iteration (``hls/learner/cycles.h``): the count the cycle model
(`drlhet.dse.devices.learner_cycles`) is checked against. It needs the repository's ``hls/``
sources and a C++17 compiler.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from drlhet.backends.base import BackendUnavailable

__all__ = ["LEARNER_DIR", "build", "stepped_cycles"]

LEARNER_DIR = Path(__file__).resolve().parents[3] / "hls" / "learner"


def build(out: Path) -> Path:
    """Compiles the testbench into ``out``; returns the executable.

    Raises:
      BackendUnavailable: no compiler, or no ``hls/learner`` sources (an installed wheel
        without the repository).
    """
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise BackendUnavailable("no C++ compiler (g++) for the testbench")
    if not (LEARNER_DIR / "learner_tb.cpp").is_file():
        raise BackendUnavailable(f"no HLS sources at {LEARNER_DIR} (a repository has them)")
    exe = Path(out) / "learner_tb"
    cmd = [cxx, "-std=c++17", "-O2", "-w", f"-I{LEARNER_DIR}", str(LEARNER_DIR / "learner_tb.cpp")]
    subprocess.run([*cmd, "-o", str(exe)], check=True, capture_output=True, text=True)
    return exe


def stepped_cycles(
    exe: Path,
    obs_dim: int,
    hidden: tuple[int, ...],
    actions: int,
    batch: int,
    dueling: bool = True,
    double: bool = True,
) -> tuple[int, int]:
    """``(cycles, parameters)`` of one DQN step of this network, stepped by the testbench."""
    args = [obs_dim, actions, int(dueling), int(double), batch, *hidden]
    run = subprocess.run(
        [str(exe), "--cycles", *map(str, args)], capture_output=True, text=True, check=False
    )
    if run.returncode != 0:
        raise ValueError(run.stderr.strip() or f"learner_tb exited with {run.returncode}")
    words = run.stdout.split()
    return int(words[1]), int(words[3])

"""The learner module's g++ testbench (``hls/learner/learner_tb.cpp``), built and run from Python.

docs/design.md section 3. Its ``--cycles`` (``--cycles-ddpg``) mode runs one DQN (DDPG / TD3)
learner step of the HLS code, its pipelined loops counting their iterations as they run, and
steps those loops iteration by iteration (``hls/learner/cycles.h``): the count the cycle model
(`drlhet.dse.devices.learner_cycles`) is checked against; its ``--top`` mode runs the
synthesized top against the C-simulation's path. It needs the repository's ``hls/`` sources
and a C++17 compiler.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from drlhet.backends.base import BackendUnavailable

__all__ = ["LEARNER_DIR", "build", "stepped_cycles", "stepped_ddpg_cycles"]

LEARNER_DIR = Path(__file__).resolve().parents[3] / "hls" / "learner"


def build(out: Path, defines: dict[str, int] | None = None, sources: Path = LEARNER_DIR) -> Path:
    """Compiles the testbench into ``out``; returns the executable. ``defines``: the
    synthesized top's configuration (``LEARNER_*`` macros, ``hls/learner/learner_top.h``) for
    ``--top``, its tiles sized to its network unless they set ``LEARNER_SIZED_TILES`` 0
    (without ``defines``: 0, the module's bounds, for ``--cycles`` on any network);
    ``sources``: the folder of the module's sources (default: the repository's).

    Raises:
      BackendUnavailable: no compiler, or no ``hls/learner`` sources (an installed wheel
        without the repository).
    """
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise BackendUnavailable("no C++ compiler (g++) for the testbench")
    if not (sources / "learner_tb.cpp").is_file():
        raise BackendUnavailable(f"no HLS sources at {sources} (a repository has them)")
    exe = Path(out) / "learner_tb"
    # no top configuration: the build runs --cycles on any network, so its tiles are the
    # module's 256 columns, not the default top's own (LEARNER_SIZED_TILES)
    defines = {"LEARNER_SIZED_TILES": 0} if defines is None else defines
    macros = [f"-D{k}={v}" for k, v in defines.items()]
    cmd = [cxx, "-std=c++17", "-O2", "-w", *macros, f"-I{sources}"]
    cmd.append(str(sources / "learner_tb.cpp"))
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
    return _run(exe, "--cycles", [obs_dim, actions, int(dueling), int(double), batch, *hidden])


def stepped_ddpg_cycles(
    exe: Path,
    obs_dim: int,
    hidden: tuple[int, ...],
    actions: int,
    batch: int,
    critics: int = 1,
    actor: bool = True,
) -> tuple[int, int]:
    """``(cycles, parameters of the actor and one critic)`` of one DDPG / TD3 step, stepped by
    the testbench (``actor``: a step that trains the actor)."""
    return _run(exe, "--cycles-ddpg", [obs_dim, actions, critics, int(actor), batch, *hidden])


def _run(exe: Path, mode: str, args: list[int]) -> tuple[int, int]:
    run = subprocess.run(
        [str(exe), mode, *map(str, args)], capture_output=True, text=True, check=False
    )
    if run.returncode != 0:
        raise ValueError(run.stderr.strip() or f"learner_tb exited with {run.returncode}")
    words = run.stdout.split()
    return int(words[1]), int(words[3])

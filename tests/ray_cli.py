"""``drlhet train``'s refusal of Ray flags, as a user sees it: one line of stderr, exit status 2
(test_ray_options.py, test_ray_run_end.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def refused(tmp_path: Path, flags: list[str], timeout_s: float = 120) -> str:
    """The one line of stderr of ``drlhet train`` refusing ``flags`` (exit 2, nothing written),
    with a Ray of its own (test_ray_actors.py's test cluster may run, and Ray joins the newest
    on the machine)."""
    got = subprocess.run(
        [sys.executable, "-m", "drlhet", "train", "--out", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        env={**os.environ, "RAY_ADDRESS": "local"},
        timeout=timeout_s,
    )
    lines = got.stderr.strip().splitlines()
    assert got.returncode == 2 and len(lines) == 1, got.stderr[-2000:]
    assert not any(tmp_path.iterdir())
    return lines[0]

"""``JAX_PLATFORMS`` naming a platform JAX cannot start here: one line naming the variable and
what to do, status 2, nothing written (was ``drlhet: failed: AssertionError: (no message)``
for ``cuda`` without JAX's CUDA plugin). Each case runs the CLI in a fresh process: JAX reads
the variable once, when it starts."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

CASES = [("bogus", "(Unable to initialize backend 'bogus': Backend 'bogus' is not in the list")]
if importlib.util.find_spec("jax_plugins") is None:  # no JAX plugin here (a GPU needs one)
    CASES.append(("cuda", "(JAX raised a bare AssertionError: is its plugin installed?)"))


@pytest.mark.parametrize("platform, said", CASES)
def test_a_platform_jax_cannot_start_is_named_in_one_line(tmp_path, platform, said):
    out = tmp_path / "runs"
    env = {**os.environ, "JAX_PLATFORMS": platform}
    args = ["train", "--steps", "6000", "--no-progress", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "drlhet", *args], env=env, capture_output=True, text=True
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"drlhet: error: JAX_PLATFORMS={platform}: JAX cannot start it ")
    assert said in lines[0] and lines[0].endswith("unset JAX_PLATFORMS, or install JAX's "
                                                   "plugin for it (for a GPU: pip install "
                                                   "'jax[cuda13]')"), lines[0]  # fmt: skip
    assert not out.exists()

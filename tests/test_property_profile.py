"""The property tests draw the same examples on every `make test` (tests/conftest.py's ``ci``
hypothesis profile), new ones under ``DRLHET_HYPOTHESIS=explore`` (`make fuzz`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]


def _drawn(env_profile: str | None) -> list[int]:
    """The integers a property test draws in a fresh process under ``env_profile``."""
    code = (
        "import tests.conftest\n"
        "from hypothesis import given, settings, strategies as s\n"
        "seen = []\n"
        "@settings(max_examples=8, deadline=None)\n"
        "@given(s.integers(0, 10**9))\n"
        "def prop(x): seen.append(x)\n"
        "prop(); print(seen)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DRLHET_HYPOTHESIS"}
    if env_profile is not None:
        env["DRLHET_HYPOTHESIS"] = env_profile
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return [int(x) for x in re.findall(r"\d+", out.stdout.strip().splitlines()[-1])]


def test_the_suite_draws_the_same_examples_every_run():
    assert settings.default.derandomize and settings.default.database is None
    assert _drawn(None) == _drawn(None)


def test_explore_draws_new_examples_each_run():
    assert _drawn("explore") != _drawn("explore")


def test_a_misspelt_profile_is_refused_naming_it():
    env = {**os.environ, "DRLHET_HYPOTHESIS": "explor"}
    out = subprocess.run(
        [sys.executable, "-c", "import tests.conftest"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert "DRLHET_HYPOTHESIS='explor': one of ci, explore" in out.stderr


def test_the_fuzz_keeps_its_own_sizes_under_the_profile():
    from tests.backends.test_fuzz import test_backend_equals_reference as fuzz

    used = fuzz._hypothesis_internal_use_settings  # what hypothesis runs it with
    assert used.derandomize and used.max_examples == 5

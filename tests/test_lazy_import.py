"""gymnax imported without its plotting stack (`drlhet.envs.lazy_import`): what it defers still
works on first use, and a CartPole run never loads seaborn's dependencies."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from drlhet.envs.lazy_import import Deferred, defer


@pytest.fixture
def unimported(monkeypatch):
    """A standard-library module that is not imported (its entry removed for the test)."""
    name = "colorsys"
    monkeypatch.delitem(sys.modules, name, raising=False)
    yield name
    sys.modules.pop(name, None)


def test_a_deferred_module_imports_on_its_first_attribute(unimported):
    defer(unimported)
    stand_in = sys.modules[unimported]
    assert isinstance(stand_in, Deferred)
    assert stand_in.__spec__.name == unimported  # find_spec answers without importing
    assert stand_in.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    real = sys.modules[unimported]
    assert not isinstance(real, Deferred) and real.rgb_to_hsv is stand_in.rgb_to_hsv


def test_an_imported_or_missing_module_is_left_alone(unimported):
    import json

    defer("json")
    assert sys.modules["json"] is json
    defer("no_such_module_here")
    assert "no_such_module_here" not in sys.modules


def test_a_cartpole_env_loads_no_plotting_and_plots_still_work():
    # a fresh interpreter: whether seaborn's dependencies load depends on what ran before
    code = textwrap.dedent(
        """
        import sys
        from drlhet.envs import make_env
        make_env("CartPole-v1", 2)
        heavy = [m for m in ("seaborn", "matplotlib.pyplot")
                 if not type(sys.modules.get(m)).__name__ == "Deferred"]
        assert heavy == [] and "pandas" not in sys.modules and "scipy.stats" not in sys.modules
        import seaborn as sns
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        ax.plot([0, 1], color=sns.color_palette("cubehelix", 3)[0])
        assert type(sys.modules["seaborn"]).__name__ == "module" and "pandas" in sys.modules
        print("ok")
        """
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout.strip() == "ok", got.stderr

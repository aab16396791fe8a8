"""gymnax without its plotting stack: `import_gymnax` defers seaborn and pyplot until first use.

gymnax 1.0's package ``__init__`` imports every environment it ships, and its Pong module
imports seaborn and ``matplotlib.pyplot`` (for rendering) at import time. That pulls in
seaborn, pandas, scipy.stats and pyplot: ``import gymnax`` took 1.7-2.6 s on the 2-core VM
(warm file cache, after jax; five fresh interpreters), 0.24-0.38 s with those two deferred, a
large share of a cached run's start-up. drlhet never renders through gymnax, so
before the first ``import gymnax`` each of `DEFERRED` that is installed but not yet imported
gets a stand-in in ``sys.modules`` (`Deferred`). The first attribute anyone reads from the
stand-in imports the real module, which replaces it in ``sys.modules``, and returns the real
attribute; nothing else changes. (`importlib.util.LazyLoader` does not do here: the import
statement in gymnax reads ``__spec__``, which loads a lazy module at once.)
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any

__all__ = ["import_gymnax", "Deferred", "DEFERRED"]

DEFERRED = ("seaborn", "matplotlib.pyplot")
"""Modules gymnax imports only to render: loaded on first use instead of at its import."""


class Deferred(ModuleType):
    """Stands in ``sys.modules`` (and as its parent package's attribute) for a module not yet
    imported; reading any attribute it lacks imports the real module and reads it there."""

    def __getattr__(self, attr: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        return getattr(importlib.import_module(name), attr)


def defer(name: str) -> None:
    """Puts a `Deferred` in ``sys.modules`` for ``name``, unless it is imported already or
    not installed."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    stand_in = Deferred(name)
    stand_in.__spec__ = spec  # importlib.util.find_spec(name) answers without importing
    sys.modules[name] = stand_in
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, stand_in)


def import_gymnax() -> ModuleType:
    """``import gymnax``, with `DEFERRED` imported on first use rather than by gymnax's import."""
    if "gymnax" not in sys.modules:
        for name in DEFERRED:
            defer(name)
    import gymnax

    return gymnax

"""The backend registry, keyed by (primitive, backend) and resolved before tracing.

A backend is registered with a *loader*: a zero-argument function that returns the
implementation or raises `BackendUnavailable(reason)` (a library that failed to build, a device
that is absent). Loaders run on first lookup, so importing drlhet never touches a device.

Replay primitives and their signatures (``nodes`` is a ``SumTreeState``):

* ``"find"``: ``(tree, targets[B]) -> (indices[B] int32, leaf_values[B], total[])``
* ``"update"``: ``(tree, indices[B], values[B], keep[B] | None) -> tree``
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["BackendUnavailable", "register", "lookup", "available", "PRIMITIVES"]

PRIMITIVES = ("env_step", "act", "insert", "sample", "update", "train", "find")

_LOADERS: dict[tuple[str, str], Callable[[], Any]] = {}
_CACHE: dict[tuple[str, str], Any] = {}


class BackendUnavailable(RuntimeError):
    """A backend cannot run here; the message says what is missing."""


def register(primitive: str, backend: str, loader: Callable[[], Any]) -> None:
    """Registers ``loader`` as the source of ``primitive`` on ``backend``."""
    _LOADERS[(primitive, backend)] = loader
    _CACHE.pop((primitive, backend), None)


def lookup(primitive: str, backend: str) -> Any:
    """Returns the implementation of ``primitive`` on ``backend``.

    Raises:
      BackendUnavailable: the backend is unknown for this primitive or cannot load here.
    """
    key = (primitive, backend)
    if key in _CACHE:
        return _CACHE[key]
    if key not in _LOADERS:
        known = sorted(b for p, b in _LOADERS if p == primitive)
        raise BackendUnavailable(
            f"no backend {backend!r} for primitive {primitive!r}; registered: {known}"
        )
    fn = _LOADERS[key]()
    _CACHE[key] = fn
    return fn


def available(primitive: str) -> list[str]:
    """Backends of ``primitive`` that load on this machine."""
    names = []
    for p, b in list(_LOADERS):
        if p != primitive:
            continue
        try:
            lookup(p, b)
        except BackendUnavailable:
            continue
        names.append(b)
    return sorted(names)

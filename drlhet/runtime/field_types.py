"""The kinds of a configuration's fields, checked before their ranges.

A `drlhet.runtime.config.TrainConfig` made from Python is not type-checked by the dataclass: a
``seeds=2.5`` failed deep in JAX with words naming no field, a ``uniform="yes"`` or
``dqn.double="no"`` ran as True. `wrong_kind` finds the first field whose value is not of the
kind its annotation says (an integer, a real number, a bool, a text, a tuple of integers, one
of a `Literal`'s values, a nested configuration; ``X | None`` allows None), so that
`drlhet.runtime.config.check` names it in one line.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any

import numpy as np

__all__ = ["wrong_kind"]


def wrong_kind(config: Any, prefix: str = "") -> tuple[str, str] | None:
    """``(field, message)`` of the first field of the dataclass ``config`` (nested ones
    spelled ``dqn.hidden``) whose value is not of its annotated kind; None when all are."""
    for field, hint in _hints(config.__class__).items():
        value = getattr(config, field)
        name = prefix + field
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            if not isinstance(value, hint):
                return name, f"{name} must be a {hint.__name__}, got {_kind(value)} {value!r}"
            found = wrong_kind(value, name + ".")
            if found is not None:
                return found
            continue
        what = _what(hint, value)
        if what is not None:
            return name, f"{name} must be {what}, got {_kind(value)} {value!r}"
    return None


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    return {f.name: typing.get_type_hints(cls)[f.name] for f in dataclasses.fields(cls)}


def _what(hint: Any, value: Any) -> str | None:
    """What ``value`` must be for ``hint`` (words), or None when it is of that kind."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        said = [_what(a, value) for a in args if a is not type(None)]
        if any(w is None for w in said):
            return None
        return " or ".join(w for w in said if w) + (" or None" if type(None) in args else "")
    if origin is typing.Literal:
        return None if value in args else " or ".join(map(repr, args))
    if origin is tuple:
        ints = isinstance(value, tuple) and all(_integer(v) for v in value)
        return None if ints else "a tuple of integers"
    test, words = _SIMPLE[hint]
    return None if test(value) else words


def _integer(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def _real(v: Any) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool)


def _bool(v: Any) -> bool:
    return isinstance(v, bool | np.bool_)


def _text(v: Any) -> bool:
    return isinstance(v, str)


_SIMPLE = {
    int: (_integer, "an integer"),
    float: (_real, "a number"),
    bool: (_bool, "True or False"),
    str: (_text, "text"),
}


def _kind(v: Any) -> str:
    return type(v).__name__

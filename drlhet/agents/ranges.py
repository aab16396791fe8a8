"""The ranges of the agents' hyper-parameters, checked before anything is built.

Each agent module keeps a table ``RANGES`` of field -> `Rule`; `check_ranges` raises
`HyperparameterError` naming the first field out of its range and its value. NaN is out of
every range (each rule's comparisons are false for it). `drlhet.runtime.config.check` runs the
tables of both agents' configurations, so a bad value is refused in one line before a run
directory exists; `make_dqn` and `make_ddpg` run their own, for callers of the library.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "HyperparameterError",
    "Rule",
    "check_ranges",
    "POSITIVE",
    "NON_NEGATIVE",
    "UNIT",
    "FRACTION",
    "COUNT",
    "NATURAL",
    "WIDTHS",
    "CLIP_NORM",
]

Rule = tuple[str, Callable[[Any], bool]]
"""What the value must be (the message's words) and the test it must pass."""

POSITIVE: Rule = ("finite and > 0", lambda v: math.isfinite(v) and v > 0)
NON_NEGATIVE: Rule = ("finite and >= 0", lambda v: math.isfinite(v) and v >= 0)
UNIT: Rule = ("in [0, 1]", lambda v: 0 <= v <= 1)
FRACTION: Rule = ("in (0, 1]", lambda v: 0 < v <= 1)
COUNT: Rule = (">= 1", lambda v: v >= 1)
NATURAL: Rule = (">= 0", lambda v: v >= 0)
WIDTHS: Rule = ("layer widths >= 1", lambda v: all(w >= 1 for w in v))
CLIP_NORM: Rule = ("> 0 (inf: no clipping)", lambda v: v > 0)


class HyperparameterError(ValueError):
    """A hyper-parameter out of its range; ``field`` is its name in the configuration."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def check_ranges(config: Any, rules: Mapping[str, Rule]) -> None:
    """Raises `HyperparameterError` for the first field of ``config`` (a dataclass) in
    ``rules`` whose value fails its rule: ``"<field> must be <what>, got <value>"``."""
    for field, (what, ok) in rules.items():
        value = getattr(config, field)
        if not ok(value):
            raise HyperparameterError(field, f"{field} must be {what}, got {value!r}")

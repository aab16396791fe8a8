"""Integer options as RL users write them: ``--steps 1e6``, ``--buffer-size 2^20``, ``1_000_000``.

tyro reads an ``int`` option with ``int()``, which refuses ``1e6`` (``invalid literal for
int() with base 10``), the way step counts and buffer sizes are written in papers and configs.
`parse_int` reads those exactly (as decimals, not floats: ``1e25`` is 10^25, not the float's
10000000000000000905969664) and refuses, in words, a value that is not a whole number
(``1.5``, ``nan``); `registry` hands it to tyro for every ``int`` option, ``int | None`` and
``tuple[int, ...]`` included (booleans stay booleans). Ranges stay the options' own checks.
The standard library only, and tyro when `registry` is called: the CLI and the scripts in
``experiments/`` parse before jax is imported.
"""

from __future__ import annotations

import decimal
import re
from typing import Any

__all__ = ["parse_int", "registry", "MAX_DIGITS", "MAX_EXPONENT"]

MAX_DIGITS = 30
"""The most decimal digits of an integer written in scientific notation (``1e29``): past it a
mistyped exponent (``1e300000000``) would build a huge number before any range check."""
MAX_EXPONENT = 64
"""The largest exponent of a power written ``B^E`` or ``B**E`` (``2^20``)."""

_POWER = re.compile(r"([+-]?)(\d+)\s*(?:\^|\*\*)\s*(\d+)")


def parse_int(text: str) -> int:
    """The integer ``text`` writes: a Python integer literal (``-3``, ``1_000``, ``0x10``), a
    decimal or scientific number that is whole (``1e6``, ``2.5e5``, ``010``), or a power
    ``B^E`` / ``B**E`` (``2^20``, E at most `MAX_EXPONENT`; a sign before it is the
    power's: ``-2^2`` is -4).

    Raises:
      ValueError: naming ``text``: not a number, not whole, or too large to be meant.
    """
    s = text.strip()
    if power := _POWER.fullmatch(s):
        sign, base, exponent = power[1], int(power[2]), int(power[3])
        if exponent > MAX_EXPONENT:
            raise ValueError(f"{text!r}: an exponent past {MAX_EXPONENT}")
        return -(base**exponent) if sign == "-" else base**exponent  # -2^2 is -4
    try:
        return int(s, 0)
    except ValueError:
        pass
    try:
        d = decimal.Decimal(s)
    except decimal.InvalidOperation:
        raise ValueError(f"{text!r} is not an integer") from None
    if not d.is_finite():
        raise ValueError(f"{text!r} is not an integer")
    if d.adjusted() >= MAX_DIGITS:
        raise ValueError(f"{text!r} has more than {MAX_DIGITS} digits")
    if d != d.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number")
    return int(d)


def _int_rule(info: Any) -> Any:
    """tyro's primitive rule for ``int`` (None for any other type: tyro's own rules)."""
    from tyro.constructors import PrimitiveConstructorSpec

    if info.type is not int:
        return None
    return PrimitiveConstructorSpec(
        nargs=1,
        metavar="INT",
        instance_from_str=lambda args: parse_int(args[0]),
        is_instance=lambda x: isinstance(x, int) and not isinstance(x, bool),
        str_from_instance=lambda x: [str(x)],
    )


def registry() -> Any:
    """A tyro ``ConstructorRegistry`` that parses ``int`` options with `parse_int` (pass it
    as ``registry=`` to ``tyro.cli`` or ``tyro.extras.subcommand_cli_from_dict``)."""
    from tyro.constructors import ConstructorRegistry

    made = ConstructorRegistry()
    made.primitive_rule(_int_rule)
    return made

"""What tyro refuses while it parses a command line (an unknown option or subcommand, a value of
the wrong type, a missing value), told in one line as every other refusal of the ``drlhet``
CLI and of the scripts in ``experiments/`` is, instead of tyro's box of several lines. Imports
nothing but the standard library: a script may use it before jax is imported."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

__all__ = ["parse_error", "HeldStderr", "parse_or_refuse"]

T = TypeVar("T")

_RULE = set("─-")


def parse_error(text: str) -> str:
    """The message of a tyro parsing error (``text``: what tyro wrote to stderr), one line: the
    first section after its title (``--x: invalid literal ...``, ``Unrecognized options: ...``)
    without the box, the rules and the wrapping; the title put first where the section does not
    say it (``missing subcommand: Expected one of ...``); missing required options by their
    flags only (``missing required options: --rows, --out``)."""
    lines = [ln.strip().strip("│|╭╮╰╯+").strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    title = lines[0].strip("─- ") if lines else ""
    section: list[str] = []
    for ln in lines[1:]:  # tyro draws the title in a box's top border or on a line of its own
        if set(ln) <= _RULE:
            if section:
                break
            continue
        section.append(ln)
    if section and section[0].startswith("Missing from"):  # each option's flag, its help
        flags = [ln.split()[0] for ln in section[1:] if ln.startswith("--")]
        if flags:
            return f"missing required option{'s' * (len(flags) > 1)}: {', '.join(flags)}"
    message = " ".join(section) or title or "(no message)"
    if title and not title.endswith("error") and title.split()[0].lower() not in message.lower():
        message = f"{title.lower()}: {message}"
    return _one_type(message.removeprefix("Error parsing "))


_EACH_TYPE = re.compile(r"- <class '([\w.]+)'>: ")


def _one_type(message: str) -> str:
    """An optional option's refusal (``int | None``: tyro tries each type and lists every
    error, ``None``'s "does not match choices" too) as the one type's own error, with the
    option's name: ``--steps: '2.5' is not a whole number``; any other message as it is."""
    option, _, rest = message.partition(": no type matching ")
    if not rest or "Got errors: " not in rest:
        return message
    parts = _EACH_TYPE.split(rest.partition("Got errors: ")[2])[1:]  # type, error, type, ...
    errors = [e.strip() for t, e in zip(parts[::2], parts[1::2], strict=True) if t != "NoneType"]
    return f"{option}: {errors[0]} (or None)" if len(errors) == 1 else message


class HeldStderr:
    """``sys.stderr`` held in a buffer while tyro parses (a context manager).

    `release` puts the stream back and passes on what was written meanwhile (a warning, say);
    `refusal` puts it back and returns tyro's refusal in one line instead."""

    def __init__(self) -> None:
        self.stderr = sys.stderr
        self.buffer = io.StringIO()

    def __enter__(self) -> HeldStderr:
        sys.stderr = self.buffer
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """The stream back in place, with what was written to the buffer (once)."""
        if sys.stderr is self.buffer:
            sys.stderr = self.stderr
            self.stderr.write(self.buffer.getvalue())

    def refusal(self, stop: SystemExit) -> str:
        """Tyro's refusal in one line if ``stop`` is tyro's exit with an error while the stream
        is held (then the stream is put back, the box dropped); else ""."""
        if sys.stderr is not self.buffer or stop.code in (0, None):
            return ""
        sys.stderr = self.stderr
        return parse_error(self.buffer.getvalue())


def parse_or_refuse(parse: Callable[[], T], refuse: Callable[[str], NoReturn]) -> T:
    """``parse()`` (a tyro parse, nothing run inside it) with stderr held; what tyro refuses goes
    to ``refuse`` in one line instead of its box. ``--help`` and its exit 0 pass through."""
    with HeldStderr() as held:
        try:
            return parse()
        except SystemExit as e:
            why = held.refusal(e)
            if not why:
                raise
            refuse(why)

"""Integer options as users write them (drlhet/integers.py): ``1e6``, ``2^20``, ``1_000``
read exactly; what is not a whole number refused in words, on the CLI in one line."""

from __future__ import annotations

import pytest

from drlhet.cli import main
from drlhet.integers import MAX_DIGITS, parse_int


@pytest.mark.parametrize(
    "text, value",
    [
        ("42", 42), ("-3", -3), ("1_000_000", 1_000_000), ("0x10", 16), (" 7 ", 7),
        ("010", 10),  # int(_, 0) refuses a leading zero; as a decimal it is ten
        ("1e6", 10**6), ("2.5e5", 250_000), ("1E3", 1000), ("-2e3", -2000), ("3.0", 3),
        ("1e25", 10**25),  # a decimal: the float 1e25 is 10000000000000000905969664
        ("2^20", 2**20), ("2**10", 1024), ("16 ^ 3", 4096), ("-2^3", -8), ("-2^2", -4),
    ],
)  # fmt: skip
def test_integers_read_as_written(text, value):
    assert parse_int(text) == value and type(parse_int(text)) is int


@pytest.mark.parametrize(
    "text, why",
    [
        ("abc", "'abc' is not an integer"), ("", "'' is not an integer"),
        ("nan", "'nan' is not an integer"), ("inf", "'inf' is not an integer"),
        ("1.5", "'1.5' is not a whole number"), ("2.5e-1", "is not a whole number"),
        ("1e-3", "is not a whole number"), (f"1e{MAX_DIGITS}", f"more than {MAX_DIGITS} digits"),
        ("1e300000000", "more than"),  # refused before building a number of 3e8 digits
        ("2^65", "an exponent past 64"), ("2^x", "not an integer"), ("True", "not an integer"),
    ],
)  # fmt: skip
def test_what_is_not_a_whole_number_is_refused_naming_it(text, why):
    with pytest.raises(ValueError, match=why.replace("^", r"\^")):
        parse_int(text)


def test_train_reads_its_integer_options_as_written(tmp_path, monkeypatch):
    """``drlhet train --steps 1.5e4 --buffer-size 2^14 --dqn.hidden 1e1 8``: the run is given
    those integers (its configuration as the runner gets it)."""
    seen = []

    def runner(config, *args, **kwargs):
        seen.append(config)
        raise KeyboardInterrupt  # nothing run: the configuration was the point

    monkeypatch.setattr("drlhet.cli.train.run", runner)
    with pytest.raises(SystemExit):
        main(["train", "--steps", "1.5e4", "--buffer-size", "2^14", "--dqn.hidden", "1e1", "8",
              "--warmup", "1_000", "--checkpoint-every", "0", "--no-progress",
              "--out", str(tmp_path)])  # fmt: skip
    (config,) = seen
    assert (config.steps, config.buffer_size, config.warmup) == (15_000, 2**14, 1000)
    assert config.dqn.hidden == (10, 8)

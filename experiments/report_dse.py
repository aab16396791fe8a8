"""Markdown tables from `validate_dse.py`'s JSON (for docs/results.md).

Usage:
  python experiments/report_dse.py [results/dse_validation.json]
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

import checked_cli
import tyro


def _short(mapping: str) -> str:
    parts = dict(item.split("=") for item in mapping.split(","))
    a, r, ln = parts["actors"], parts["replay"], parts["learner"]
    return f"A {a.split('@')[1]} / R {r} / L {ln.split('@')[1]}"


ROW_KEYS: tuple[str, ...] = ("batch", "capacity", "mapping", "error")
ROW_KEYS += ("predicted_trained_samples_per_s", "measured_trained_samples_per_s")
CONFIG_KEYS = ("batch", "capacity", "pick", "pick_within", "pick_over_worst", "baselines")
TOTALS = ("rows", "configs", "median_abs_error", "max_abs_error", "picks_within_5pct")
"""What the tables read of validate_dse.py's JSON: the whole, each row, each configuration."""


BASELINES = (
    "all on CPU (jax)",
    "replay on CPU, learner on GPU",
    "all on GPU",
    "paper-style: Python replay",
)
"""The baselines the second table shows, by their names in each configuration's ``baselines``."""


def wrong_shape(data: Any) -> str:
    """Why ``data`` (the file's JSON) is not validate_dse.py's, or "": what the tables read is
    there and of its type (numbers, capacities whole, mappings ``actors=...@...,replay=...,
    learner=...@...``), so that nothing it holds stops `main` halfway."""
    why = checked_cli.lacking(data, TOTALS)
    why = why or checked_cli.rows_lacking(data["rows"], ROW_KEYS, "rows")
    why = why or checked_cli.rows_lacking(data["configs"], CONFIG_KEYS, "configs")
    why = why or _not_numbers(data, "the file", ("median_abs_error", "max_abs_error"))
    unpaired = ("median_abs_error_unpaired", "max_abs_error_unpaired")
    if not why and "max_abs_error_unpaired" in data:
        why = checked_cli.lacking(data, unpaired) or _not_numbers(data, "the file", unpaired)
    for i, r in enumerate(data["rows"] if not why else ()):
        rounds = r.get("error_per_round", [])
        numbers: tuple[str, ...] = ("error", "error_unpaired", ROW_KEYS[4], ROW_KEYS[5])
        why = why or _not_numbers(r, f"rows[{i}]", numbers) or _not_mapping(r, f"rows[{i}]")
        if not why and not isinstance(rounds, list):
            why = f"rows[{i}]'s error_per_round is {rounds!r}, not a list"
        why = why or _not_numbers(dict(enumerate(rounds)), f"rows[{i}].error_per_round")
    for i, c in enumerate(data["configs"] if not why else ()):
        numbers = ("pick_within", "pick_over_worst")
        why = why or _not_numbers(c, f"configs[{i}]", numbers) or _not_mapping(c, f"configs[{i}]")
        why = why or checked_cli.lacking(c["baselines"], (), f"configs[{i}].baselines")
        for name in BASELINES if not why else ():
            if name in c["baselines"]:
                base = c["baselines"][name]
                where = f"configs[{i}].baselines[{name!r}]"
                why = why or checked_cli.lacking(base, ("pick_speedup", "basis"), where)
                why = why or _not_numbers(base, where, ("pick_speedup",))
    return f"not validate_dse.py's JSON ({why})" if why else ""


def _not_numbers(value: dict, what: str, keys: Any = None) -> str:
    """Why ``value``'s ``keys`` (None: all) that it holds are not all numbers, or ""."""
    for key in value if keys is None else keys:
        v = value.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int | float):
            where = f"{what}'s {key}" if keys else f"{what}[{key}]"
            return f"{where} is {v!r}, not a number"
    return ""


def _not_mapping(value: dict, what: str) -> str:
    """Why ``value``'s capacity is not a whole number above 0 or its mapping (a row's) or pick (a
    configuration's) is not one `_short` reads, or ""."""
    capacity = value["capacity"]
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        return f"{what}'s capacity is {capacity!r}, not a whole number above 0"
    key = "mapping" if "mapping" in value else "pick"
    try:
        _short(value[key])
    except (AttributeError, IndexError, KeyError, ValueError):
        return f"{what}'s {key} is {value[key]!r}, not actors=...@...,replay=...,learner=...@..."
    return ""


def round_spread(rows: list[dict]) -> tuple[float, int, int] | None:
    """How far one mapping's rounds disagree, the machine's noise beside the model's error:
    ``(median over rows of half the range of its per-round errors, rows whose rounds have
    errors of both signs, rows of two rounds or more)``; None without such rows. A median
    |error| about the half-range is as small as the rounds can tell apart; one well above it,
    with the rounds on one side, is the model's (docs/results.md, the k = 1 runs)."""
    spans = [r["error_per_round"] for r in rows if len(r.get("error_per_round", [])) > 1]
    if not spans:
        return None
    half = statistics.median((max(e) - min(e)) / 2 for e in spans)
    return half, sum(min(e) < 0 < max(e) for e in spans), len(spans)


def spread_words(rows: list[dict]) -> str:
    """`round_spread` in words (empty without rows of two rounds)."""
    spread = round_spread(rows)
    if spread is None:
        return ""
    half, both, n = spread
    return (
        f"one mapping's rounds disagree by a median half-range of {half:.1%}; in {both} of "
        f"{n} mappings the rounds' errors take both signs"
    )


def main(path: Path) -> str:
    data = json.loads(path.read_text())
    out = [
        "| B | C | mapping (actors / replay / learner) | predicted | measured | error "
        "| error per round | unpaired |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        rounds = " ".join(f"{e:+.0%}" for e in r.get("error_per_round", []))
        unpaired = f"{r['error_unpaired']:+.1%}" if "error_unpaired" in r else "-"
        out.append(
            f"| {r['batch']} | 2^{r['capacity'].bit_length() - 1} | {_short(r['mapping'])} | "
            f"{r['predicted_trained_samples_per_s'] / 1e3:,.0f}k | "
            f"{r['measured_trained_samples_per_s'] / 1e3:,.0f}k | {r['error']:+.1%} | "
            f"{rounds or '-'} | {unpaired} |"
        )
    out += [
        "",
        "| B | C | DSE pick | % of best measured | x worst runnable | x all-CPU jax "
        "| x replay CPU + learner GPU | x all GPU | x paper-style Python replay |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in data["configs"]:
        cells = []
        for n in BASELINES:
            b = c["baselines"].get(n)
            cells.append(f"{b['pick_speedup']:.2f}x ({b['basis']})" if b else "-")
        out.append(
            f"| {c['batch']} | 2^{c['capacity'].bit_length() - 1} | {_short(c['pick'])} | "
            f"{c['pick_within']:.1%} | {c['pick_over_worst']:.2f}x | " + " | ".join(cells) + " |"
        )
    out.append("")
    unpaired = (
        f" (unpaired: median {data['median_abs_error_unpaired']:.1%}, max "
        f"{data['max_abs_error_unpaired']:.1%})"
        if "max_abs_error_unpaired" in data
        else ""
    )
    out.append(
        f"Median |error| {data['median_abs_error']:.1%}, max {data['max_abs_error']:.1%} over "
        f"{len(data['rows'])} mappings{unpaired}; pick within 5% of the best measured "
        f"everywhere: {data['picks_within_5pct']}."
    )
    if spread_words(data["rows"]):
        out.append(f"Between rounds, {spread_words(data['rows'])}.")
    text = "\n".join(out)
    print(text)
    return text


@dataclasses.dataclass
class Args:
    path: tyro.conf.Positional[Path] = Path("results/dse_validation.json")
    """validate_dse.py's JSON."""


if __name__ == "__main__":
    checked_cli.run(
        Args, lambda a: main(a.path), {}, lambda a: checked_cli.unreadable_json(a.path, wrong_shape)
    )

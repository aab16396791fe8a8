"""Re-scores a DSE validation with the model as it is now, without running anything again.

`experiments/validate_dse.py` keeps, for every round, the profile it measured and every
mapping's measurement. Here each round's predictions are rebuilt from that round's profile with
the current `drlhet.dse.model.Model` and paired with that round's measurement, as the validation
pairs them: so a change to the model can be fitted on one validation's measurements and checked
on another's (docs/results.md says which was fitted on which). The host baseline's costs are
not kept; mappings that need them are not runnable and are not scored.

Usage:
  python experiments/rescore_dse.py results/dse_validation_in_program_k4.json [more.json ...]
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from pathlib import Path
from typing import Any

import checked_cli
import tyro

from drlhet.dse.devices import load_sheets
from drlhet.dse.key import ProfileKey
from drlhet.dse.model import Model, Place
from drlhet.dse.trace import shapes_of


def _profile(medians: dict) -> dict:
    """A profile from the medians a validation keeps (min and max set to the median)."""
    return {
        group: {n: {"median": v, "min": v, "max": v} for n, v in names.items()}
        for group, names in medians.items()
    }


def _places(text: str) -> dict[str, Place]:
    """``actors=jax@cpu:0,...`` -> group -> Place."""
    out = {}
    for part in text.split(","):
        group, where = part.split("=")
        backend, device = where.split("@")
        out[group] = Place(backend, device)
    return out


def rescore(path: Path) -> list[float]:
    """Prints the old and new paired errors of every row of ``path``; returns the new ones."""
    data = json.loads(Path(path).read_text())
    sheets, errors = load_sheets(), []
    print(f"\n== {path} ==")
    print(f"{'B':>4} {'capacity':>9} {'mapping':<62} {'before':>7} {'now':>7}  per round")
    for row in data["rows"]:
        key = ProfileKey(batch=row["batch"], capacity=row["capacity"])
        rounds = [
            r for r in data["round_profiles"]
            if r["batch"] == row["batch"] and r["capacity"] == row["capacity"]
        ]  # fmt: skip
        paired = []
        for rnd, rec in zip(rounds, row["rounds"], strict=True):
            profiles = {b: _profile(p) for b, p in rnd["profiles"].items()}
            # its chunks (rows before 2026-11-30 do not say: U then not lowered to divide them)
            shapes = shapes_of(key, row.get("chunk_steps"))
            model = Model(shapes, sheets, profiles, cpu_cores=os.cpu_count() or 1)
            pred = model.predict(_places(row["mapping"]), row["delay"])
            paired.append(pred.trained_samples_per_s / rec["measured"] - 1)
        err = statistics.median(paired)
        errors.append(err)
        print(
            f"{row['batch']:>4} {row['capacity']:>9} {row['mapping']:<62} {row['error']:>+7.1%} "
            f"{err:>+7.1%}  " + " ".join(f"{e:+.0%}" for e in paired)
        )
    return errors


def wrong_shape(data: Any) -> str:
    """Why ``data`` (a file's JSON) is not a validation this can re-score, or "": validate_dse.py's
    JSON with its rows (each with its rounds' measurements) and its rounds' profiles."""
    why = checked_cli.lacking(data, ("rows", "round_profiles"))
    keys: tuple[str, ...] = ("batch", "capacity", "mapping", "delay", "error", "rounds")
    why = why or checked_cli.rows_lacking(data["rows"], keys, "rows")
    keys = ("batch", "capacity", "profiles")
    why = why or checked_cli.rows_lacking(data["round_profiles"], keys, "round_profiles")
    why = why or ("" if data["rows"] else "rows is empty: nothing to re-score")
    for i, row in enumerate(data["rows"] if not why else ()):
        why = why or checked_cli.rows_lacking(row["rounds"], ("measured",), f"rows[{i}].rounds")
        steps = row.get("chunk_steps")  # absent before 2026-11-30
        if not why and steps is not None and (type(steps) is not int or steps < 1):
            why = f"rows[{i}].chunk_steps is {steps!r}, not a whole number of env steps >= 1"
    return f"not validate_dse.py's JSON with its rounds ({why})" if why else ""


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line naming the file, or "": no file, or one that is
    missing or not a validation this can re-score (all asked before the first is re-scored)."""
    why = checked_cli.no_files("PATH", args.paths)
    for path in args.paths:
        why = why or checked_cli.unreadable_json(path, wrong_shape)
    return why


def main(paths: list[str]) -> None:
    for path in paths:
        errors = [abs(e) for e in rescore(Path(path))]
        print(f"median |error| {statistics.median(errors):.1%}, max {max(errors):.1%}")


@dataclasses.dataclass
class Args:
    paths: tyro.conf.Positional[tuple[Path, ...]]
    """validate_dse.py's JSON files, each re-scored."""


if __name__ == "__main__":
    checked_cli.run(
        Args,
        lambda a: main([str(p) for p in a.paths]),
        {},
        refused,
    )

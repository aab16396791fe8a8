"""Measured GPU costs for the DSE: profiles taken on a real GPU replace its sheet model (pure).

docs/design.md section 5: a device that is present is profiled, not modeled. A *GPU profile* is
a list of rows written by ``experiments/profile_gpu.py`` on a machine with a GPU, one row per
(training shape, replay backend): every primitive's time per call inside a compiled scan on that
GPU (``compute``: ``{primitive: {"median", "min", "max"}}`` seconds), with the device sheet the
GPU was matched to (`sheet_for_device`). `GpuProfiles` picks the rows of one run's shape; the
model (`drlhet.dse.model.Model`) then costs a group placed on that sheet's GPU from them and
labels the prediction *measured* for that device.

This module imports no JAX.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from drlhet.backends.base import GPU

__all__ = [
    "sheet_for_device",
    "profile_row",
    "GpuProfiles",
    "load_gpu_profiles",
    "shapes_measured",
    "PRIMITIVES",
]

PRIMITIVES = ("actors", "insert", "sample", "train", "update")
"""What a row's ``compute`` times, as the model reads it (``actors``: act and env_step in one)."""


def sheet_for_device(device_kind: str, sheets: dict[str, dict] | None = None) -> str | None:
    """The GPU sheet a device is an instance of: the sheet whose name appears in the device's
    kind (``"NVIDIA H100 80GB HBM3"`` -> ``h100``), or None when no sheet matches."""
    if sheets is None:
        from drlhet.dse.devices import load_sheets

        sheets = load_sheets()
    kind = device_kind.lower()
    names = [n for n, s in sheets.items() if s["kind"] == GPU and n.lower() in kind]
    return max(names, key=len) if names else None


def profile_row(
    key_name: str, backend: str, device_kind: str, sheet: str | None, compute: dict, **extra: Any
) -> dict[str, Any]:
    """One GPU profile row: the ``compute`` figures (``{primitive: {"median", "min", "max"}}``
    seconds per call) of replay backend ``backend`` at the shape ``key_name``, measured on a GPU
    of kind ``device_kind`` (an instance of ``sheet``); ``extra`` fields are kept beside."""
    return {
        "key": key_name,
        "backend": backend,
        "device_kind": device_kind,
        "sheet": sheet,
        "compute": compute,
        "measured": True,
        **extra,
    }


class GpuProfiles:
    """Measured compute figures per GPU sheet and replay backend, for one run's shape.

    Args:
      rows: profile rows (`load_gpu_profiles`), of any shapes: only those whose ``key``
        matches ``key_prefix`` (the run's `drlhet.dse.key.ProfileKey` name without a backend)
        are kept.
      key_prefix: the run's key name, backend left out.
      reference: the reference replay backend's name (`drlhet.backends.reference`), whose
        row's actors and learner figures the groups take (`seconds`); None: none.
    """

    def __init__(self, rows: list[dict], key_prefix: str, reference: str | None = None):
        self.reference = reference
        self.figures: dict[str, dict[str, dict]] = {}
        self.device_kinds: dict[str, str] = {}
        for row in rows:
            if row.get("sheet") and row["key"] == f"{key_prefix}-{row['backend']}":
                self.figures.setdefault(row["sheet"], {})[row["backend"]] = row["compute"]
                self.device_kinds[row["sheet"]] = row["device_kind"]

    def has(self, sheet: str, backend: str | None = None) -> bool:
        """Whether ``sheet``'s GPU was measured (for ``backend``'s replay, when given)."""
        got = self.figures.get(sheet, {})
        return bool(got) if backend is None else backend in got

    def seconds(self, sheet: str, primitive: str, backend: str | None) -> float:
        """Median seconds per call of ``primitive`` on ``sheet``'s GPU.

        The replay's (``backend`` given) from that backend's row; the actors' and the
        learner's (``backend`` None) from the reference backend's row where there is one (each
        row times the learner's step after its own sample: after the reference's, whose batch
        gather XLA fuses into the sample, that is the step alone), else the median over the
        rows. A backend whose sample leaves the gather to the learner's program (``cuda``:
        its learner step measured 36-46 us above the reference's on an H200) has that excess
        booked to its sample, so that each mapping costs what its own row measured: a fused
        mapping with that replay the same as its row, one with another replay not its gather.
        """
        got = self.figures[sheet]
        ref = got.get(self.reference) if self.reference is not None else None
        if backend is None:
            if ref is not None:
                return ref[primitive]["median"]
            values = sorted(p[primitive]["median"] for p in got.values())
            return values[len(values) // 2]
        t = got[backend][primitive]["median"]
        if primitive == "sample" and ref is not None and backend != self.reference:
            t += max(0.0, got[backend]["train"]["median"] - ref["train"]["median"])
        return t

    def __bool__(self) -> bool:
        return bool(self.figures)


def load_gpu_profiles(path: Path) -> list[dict[str, Any]]:
    """The rows of a GPU profile file (``experiments/profile_gpu.py``'s output).

    Raises:
      ValueError: the file is missing, not JSON, or its rows lack a field the DSE needs.
    """
    try:
        rows = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"GPU profile {path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"GPU profile {path} is not valid JSON: {e}") from None
    except OSError as e:  # a folder, no permission
        raise ValueError(f"GPU profile {path} cannot be read ({e.strerror})") from None
    if not isinstance(rows, list):
        raise ValueError(f"GPU profile {path} is not a list of rows")
    for i, row in enumerate(rows):
        for field in ("key", "backend", "device_kind", "sheet", "compute"):
            if not isinstance(row, dict) or field not in row:
                raise ValueError(f"GPU profile {path}: row {i} lacks {field!r}")
        why = _wrong_row(row)
        if why:
            raise ValueError(f"GPU profile {path}: row {i}'s {why}")
    return rows


_OPTIONS = {
    "algo": "--algo",
    "env": "--env",
    "hidden": "--hidden",
    "batch": "--batch",
    "capacity": "--capacity",
    "branching": "--branching",
    "num_envs": "--num-envs",
    "sgd_steps": "--sgd-steps",
}
"""A row's ``shape`` fields (`drlhet.dse.key.ProfileKey`'s) and the ``drlhet dse`` options."""


def shapes_measured(rows: list[dict], asked: dict[str, Any]) -> list[str]:
    """The shapes ``rows`` were measured at, once each in the rows' order, as the ``drlhet
    dse`` options that set them from the shape ``asked`` (`drlhet.dse.key.ProfileKey`'s fields
    as a dict), e.g. ``--batch 4096 --hidden 256 256``; a row with no ``shape`` (or none of
    those fields) by its ``key``. For a note that names what a profile holds."""
    out: list[str] = []
    for row in rows:
        shape = row.get("shape")
        if isinstance(shape, dict) and set(_OPTIONS) <= set(shape):
            changed = [
                f"{option} {_text(shape[f])}".rstrip()  # no widths: ``--hidden`` alone
                for f, option in _OPTIONS.items()
                if _text(shape[f]) != _text(asked.get(f))
            ]
            text = " ".join(changed) or f"this shape ({row['key']})"
        else:
            text = f"key {row['key']}"
        if text not in out:
            out.append(text)
    return out


def _text(value: Any) -> str:
    """An option's value as typed: a sequence's items apart (``256 256``)."""
    if isinstance(value, list | tuple):
        return " ".join(map(str, value))
    return str(value)


def _wrong_row(row: dict) -> str:
    """What in a row (its fields there) the model cannot read, or "": its names not text (the
    sheet may be null: no sheet matched), or a primitive of `PRIMITIVES` not timed in
    ``compute`` as ``{"median": seconds, ...}`` (finite, >= 0)."""
    for field in ("key", "backend", "device_kind", "sheet"):
        if not isinstance(row[field], str) and not (field == "sheet" and row[field] is None):
            return f"{field} is {row[field]!r}, not text"
    compute = row["compute"]
    if not isinstance(compute, dict):
        return f"compute is {compute!r}, not an object"
    for name in PRIMITIVES:
        got = compute.get(name)
        median = got.get("median") if isinstance(got, dict) else None
        if (
            isinstance(median, bool)
            or not isinstance(median, int | float)
            or not math.isfinite(median)  # JSON reads NaN and Infinity
            or median < 0
        ):
            return f"compute lacks a median time of {name!r} (got {got!r})"
    return ""

"""pick_cuda_paths.py's steps: the fused cuda step rows of ``bench_replay.py``'s files, each read
as a `Step` (its batch, the path thresholds it ran with, items/s); rows of the update paths the
library no longer has are skipped, and a file or row that is not one is named.

Imports no jax.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import checked_cli


@dataclasses.dataclass(frozen=True)
class Step:
    """One measured cuda step: its batch, the path thresholds it ran with, items/s."""

    batch: int
    block: int
    narrow: int
    cluster: int
    rate: float
    top: bool | None = None  # SHARED_TOP, where the row says (rows from before it: None)
    tagged: bool = False  # TAGGED_CLAIMS (rows from before it: False)
    own: bool | None = None  # the sample was cuda's own call (rows from before it: None)
    spread: int = 0  # the spread sample's threads a block where it took the batch, else 0
    siblings: bool = False  # TAGGED_SIBLINGS (rows from before it: False)
    wide: bool = False  # CLUSTER_BLOCKS past 8 (rows from before it: False, 8 blocks)
    sorted: bool = False  # SORTED_RUNS (rows from before it: False)


def load(path: Path) -> list[dict]:
    """The rows of ``path``; ``ValueError`` naming the file when it is missing, cannot be read,
    is not JSON or is not a list of objects."""
    why = checked_cli.unreadable_json(path, _not_rows)
    if why:
        raise ValueError(why)
    return json.loads(path.read_text())


def _not_rows(data: Any) -> str:
    why = checked_cli.rows_lacking(data, ())
    return f"not a list of bench_replay rows ({why})" if why else ""


def read_steps(paths: tuple[Path, ...], capacity: int, branching: int) -> list[Step]:
    """`cuda_steps` of every file of ``paths``; ``ValueError`` naming the first file that cannot
    be read (`load`) or holds a cuda step row that is not one, and what is wrong with it."""
    steps: list[Step] = []
    for path in paths:
        try:
            steps += cuda_steps(load(path), capacity, branching)
        except ValueError as err:
            why = str(err)
            raise ValueError(why if why.startswith(str(path)) else f"{path}: {why}") from None
    return steps


def cuda_steps(rows: list[dict], capacity: int, branching: int) -> list[Step]:
    """The fused cuda steps at (capacity, K) that say which thresholds they ran with; a
    ``ValueError`` naming the first such row whose batch, items/s or thresholds are not
    numbers."""
    out = []
    for i, r in enumerate(rows):
        if not _is_cuda_step(r, capacity, branching):
            continue
        try:
            step = _step(r)  # checks the numbers that _removed_path reads
            if not _removed_path(r):
                out.append(step)
        except (KeyError, TypeError, ValueError) as err:
            why = f"lacks {err}" if isinstance(err, KeyError) else str(err)
            raise ValueError(
                f"item {i}, a fused cuda step at B {r.get('batch')!r}: {why}"
            ) from None
    return out


def _is_cuda_step(r: dict, capacity: int, branching: int) -> bool:
    """Whether ``r`` is a fused cuda step at (capacity, K) that says its thresholds."""
    keys = ("cuda_block_max_batch", "cuda_narrow_max_nodes", "cuda_cluster_max_batch")
    return (
        (r.get("impl") in ("drlhet-cuda", "drlhet-cuda-tagged", "drlhet-cuda-siblings",
                           "drlhet-cuda-wide", "drlhet-cuda-sorted", "drlhet-cuda-find")
         or re.fullmatch(r"drlhet-cuda-spread\d+", str(r.get("impl"))) is not None)
        and r.get("op") == "step"
        and r.get("mode") == "fused"
        and r.get("capacity") == capacity and r.get("branching") == branching
        and all(r.get(k) is not None for k in keys)
    )  # fmt: skip


def _step(r: dict) -> Step:
    """The `Step` of a cuda step row; ``KeyError`` or ``TypeError`` naming a value it reads
    that is missing or not a number."""
    rate = r["items_per_s"]
    if isinstance(rate, bool) or not isinstance(rate, int | float):
        raise TypeError(f"items_per_s {rate!r} is not a number")
    block, narrow, cluster = (
        _whole(r, f"cuda_{name}") for name in ("block_max_batch", "narrow_max_nodes",
                                               "cluster_max_batch")
    )  # fmt: skip
    for key in (
        "cuda_region_max_batch",
        "cuda_spread_min_batch",
        "cuda_spread_threads",
        "cuda_cluster_blocks",
    ):
        if r.get(key) is not None:
            _whole(r, key)
    wide = (r.get("cuda_cluster_blocks") or 8) > 8
    return Step(_whole(r, "batch"), block, narrow, cluster, float(rate), r.get("cuda_shared_top"),
                bool(r.get("cuda_tagged_claims")), r.get("cuda_own_sample"), _spread_of(r),
                bool(r.get("cuda_tagged_siblings")), wide,
                bool(r.get("cuda_sorted_runs")))  # fmt: skip


def _whole(r: dict, key: str) -> int:
    """``r[key]``, a whole number (``TypeError`` naming it where it is not)."""
    value = r[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{key} {value!r} is not a whole number")
    return value


def _removed_path(row: dict) -> bool:
    """Whether the row's update took a path the library no longer has: the region path (its
    batch above ``cuda_block_max_batch``, at most ``cuda_region_max_batch``) or the claims in
    the cluster's shared memory."""
    region = (
        int(row["cuda_block_max_batch"])
        < row["batch"]
        <= int(row.get("cuda_region_max_batch") or 0)
    )
    return region or bool(row.get("cuda_shared_claims"))


def _spread_of(row: dict) -> int:
    """The spread sample's threads a block where it took the row's batch (its own call, the
    batch at least ``cuda_spread_min_batch``), else 0 (rows from before it: 0)."""
    least, threads = row.get("cuda_spread_min_batch"), row.get("cuda_spread_threads")
    if least is None or threads is None or row.get("cuda_own_sample") is False:
        return 0
    return int(threads) if row["batch"] >= int(least) else 0

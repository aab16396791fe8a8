"""The CUDA backend's path thresholds, picked from the steps that ``bench_replay.py`` measured.

The cuda update and sample take one of three paths by batch size (``drlhet.backends.cuda``):
one block per tree up to ``BLOCK_MAX_BATCH``, one cluster of 8 blocks per tree up to
``CLUSTER_MAX_BATCH`` (compute capability 9.0 and up), else a launch per phase and level, whose
levels of at most ``NARROW_MAX_NODES`` nodes one block per tree recomputes. Which is fastest
where is a property of the GPU, found by measuring: ``experiments/gpu_checks.sh cluster`` times
the step with the cluster path off (``CLUSTER_SWEEP`` 0) and on, ``narrow`` with each
``NARROW_SWEEP`` value. This script reads those rows and picks:

- ``CLUSTER_MAX_BATCH``: the largest measured batch above ``BLOCK_MAX_BATCH`` up to which the
  cluster path's step beats the per-level path's by at least ``margin`` at every measured batch
  (0 when it loses at the first);
- ``NARROW_MAX_NODES``: over the measured batches that keep the per-level path (above the
  picked ``CLUSTER_MAX_BATCH``), the value of the best geometric mean of the step, where it beats
  the current value's by ``margin``;
- ``SHARED_TOP`` (the sample's descents through a copy of the tree's top levels in shared
  memory, or not; ``gpu_checks.sh top`` times the step both ways): the other setting where the
  geometric mean of its step over the current one's, over the batches measured both ways with
  the same thresholds, is at least ``margin``;
- ``TAGGED_SIBLINGS`` (with the tagged table, the leaves' parents summed from it, or after a
  barrier over the leaves; ``gpu_checks.sh tagged``, the rows as ``drlhet-cuda-siblings`` and
  ``drlhet-cuda-tagged``): the same rule, over the tagged rows;
- ``TAGGED_CLAIMS`` (the cluster update's claims in a table kept by its custom call, or in the
  workspace; the tagged rows with ``TAGGED_SIBLINGS`` as picked): the same rule.
- ``OWN_SAMPLE_MAX_BATCH`` (above it the sample is XLA's code around cuda's ``find``, not
  cuda's own call; ``gpu_checks.sh find`` times the step both ways in one run, the rows as
  ``drlhet-cuda-find``): one below the smallest measured batch from which the sample around
  ``find`` wins by ``margin`` at every measured batch; where it wins nowhere, the current value.
  It compares the sample around ``find`` with the own call the other picks leave (spread or
  not).
- ``SPREAD_MIN_BATCH`` and ``SPREAD_THREADS`` (from that batch the sample call is one
  cooperative launch spread over the GPU in blocks of that many threads; ``gpu_checks.sh
  spread`` times the step with each ``SPREAD_AB_THREADS`` value beside the own call's path
  without it, in one run, the rows as ``drlhet-cuda-spreadT``): the threads of the best
  geometric mean over the measured batches, and the smallest measured batch from which they
  win by ``margin`` at every measured batch; where they win nowhere, the current values.

Where the rows cannot decide, the current value stays, and the reason is printed. The choice is
*measured* (on the GPU that wrote the rows), for those shapes only (capacity, K). It prints the
evidence, writes it as JSON, and writes ``CUDA_CLUSTER_MAX_BATCH=...``,
``CUDA_NARROW_MAX_NODES=...``, ``CUDA_SHARED_TOP=0|1``, ``CUDA_TAGGED_CLAIMS=0|1``,
``CUDA_TAGGED_SIBLINGS=0|1``,
``CUDA_OWN_SAMPLE_MAX_BATCH=...``,
``CUDA_SPREAD_MIN_BATCH=...`` and ``CUDA_SPREAD_THREADS=...`` lines for ``gpu_checks.sh`` to
read before its later stages (``experiments/with_cuda_paths.py`` runs a command with them).
The current values are the library's unless given. Rows of the update paths that the library
no longer has (one cluster per tree whose blocks each own a region of the tree, the claims in
the cluster's shared memory: measured slower or no faster on an H100 and removed) are skipped.

Usage:
  python experiments/pick_cuda_paths.py --rows cluster_*.json narrow_*.json top_*.json \\
      tagged.json find.json spread.json \\
      --env-out cuda_paths.env --out cuda_paths.json
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any, NoReturn

import checked_cli


@dataclasses.dataclass
class Args:
    rows: tuple[Path, ...]
    """``bench_replay.py`` row files (the ``cluster`` and ``narrow`` stages' output)."""
    capacity: int = 2**20
    branching: int = 16
    block_max_batch: int | None = None
    """``BLOCK_MAX_BATCH`` (None: the library's): a batch no larger takes the one-block path, so
    the cluster path is only picked above it."""
    cluster_max_batch: int | None = None
    """The current ``CLUSTER_MAX_BATCH`` (None: the library's), kept where the rows cannot
    decide."""
    narrow_max_nodes: int | None = None
    """The current ``NARROW_MAX_NODES`` (None: the library's), kept where the rows cannot decide
    (the ``cluster`` stage's runs use it)."""
    shared_top: bool | None = None
    """The current ``SHARED_TOP`` (None: the library's), kept where the rows cannot decide (the
    other stages' runs use it)."""
    tagged_claims: bool | None = None
    """The current ``TAGGED_CLAIMS`` (None: the library's), kept where the rows cannot decide."""
    tagged_siblings: bool | None = None
    """The current ``TAGGED_SIBLINGS`` (None: the library's), kept where the rows cannot
    decide."""
    own_sample_max_batch: int | None = None
    """The current ``OWN_SAMPLE_MAX_BATCH`` (None: the library's), kept where the rows cannot
    decide."""
    spread_min_batch: int | None = None
    """The current ``SPREAD_MIN_BATCH`` (None: the library's), kept where the rows cannot
    decide."""
    spread_threads: int | None = None
    """The current ``SPREAD_THREADS`` (None: the library's), kept where the rows cannot
    decide."""
    margin: float = 1.03
    """How much faster (step items/s) a change must be than what it replaces."""
    out: Path = Path("cuda_paths.json")
    env_out: Path | None = None


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
                           "drlhet-cuda-find")
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
    for key in ("cuda_region_max_batch", "cuda_spread_min_batch", "cuda_spread_threads"):
        if r.get(key) is not None:
            _whole(r, key)
    return Step(_whole(r, "batch"), block, narrow, cluster, float(rate), r.get("cuda_shared_top"),
                bool(r.get("cuda_tagged_claims")), r.get("cuda_own_sample"), _spread_of(r),
                bool(r.get("cuda_tagged_siblings")))  # fmt: skip


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


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _unbroken_wins(evidence: list[dict], what: str, margin: float) -> tuple[int, str]:
    """The last batch of the run of wins from the smallest (``evidence`` by batch, each with
    ``wins``), or 0 when ``what`` loses at the first; and why."""
    chosen = 0
    for e in evidence:
        if not e["wins"]:
            break
        chosen = e["batch"]
    if chosen == 0:
        return 0, f"{what} does not win by >= {margin}x at B {evidence[0]['batch']}"
    return chosen, f"{what} wins by >= {margin}x up to B {chosen}"


def pick_cluster(steps: list[Step], args: Args) -> tuple[int, list[dict], str]:
    """``CLUSTER_MAX_BATCH``, the evidence per batch, and why. Only runs that kept the batch off
    the one-block path and used the current narrow limit compare (the ``cluster`` stage's)."""
    runs = [s for s in steps if s.block < s.batch and s.narrow == args.narrow_max_nodes]
    evidence: list[dict] = []
    for batch in sorted({s.batch for s in runs if s.batch > args.block_max_batch}):
        on = _mean([s.rate for s in runs if s.batch == batch and s.cluster >= batch])
        off = _mean([s.rate for s in runs if s.batch == batch and s.cluster < batch])
        if on is not None and off is not None:
            evidence.append(
                {"batch": batch, "cluster_items_per_s": on, "per_level_items_per_s": off,
                 "ratio": on / off, "wins": on >= args.margin * off}
            )  # fmt: skip
    if not evidence:
        return args.cluster_max_batch, evidence, "no batch above BLOCK_MAX_BATCH measured both ways"
    chosen, why = _unbroken_wins(evidence, "the cluster path", args.margin)
    return chosen, evidence, why


def pick_narrow(steps: list[Step], cluster: int, args: Args) -> tuple[int, list[dict], str]:
    """``NARROW_MAX_NODES`` for the batches the per-level path keeps (above ``cluster``), by
    the geometric mean of their steps; the evidence per value, and why."""
    runs = [s for s in steps if s.block < s.batch and s.cluster < s.batch]
    batches = sorted({s.batch for s in runs if s.batch > max(cluster, args.block_max_batch)})
    if not batches:
        return args.narrow_max_nodes, [], "no batch keeps the per-level path"
    evidence: list[dict] = []
    for narrow in sorted({s.narrow for s in runs}, reverse=True):
        rates = [
            _mean([s.rate for s in runs if s.narrow == narrow and s.batch == b]) for b in batches
        ]
        known = [r for r in rates if r is not None]
        if len(known) == len(batches):
            gmean = math.exp(sum(math.log(r) for r in known) / len(known))
            evidence.append(
                {"narrow_max_nodes": narrow, "batches": batches, "gmean_items_per_s": gmean}
            )
    current = [e for e in evidence if e["narrow_max_nodes"] == args.narrow_max_nodes]
    if not evidence or not current:
        why = f"the current value {args.narrow_max_nodes} was not measured at B {batches}"
        return args.narrow_max_nodes, evidence, why
    best = max(evidence, key=lambda e: e["gmean_items_per_s"])
    if best["gmean_items_per_s"] >= args.margin * current[0]["gmean_items_per_s"]:
        return best["narrow_max_nodes"], evidence, f"the best geometric mean over B {batches}"
    why = f"no value beats {args.narrow_max_nodes} by >= {args.margin}x over B {batches}"
    return args.narrow_max_nodes, evidence, why


def pick_switch(
    steps: list[Step], switch: str, current: bool, args: Args, names: tuple[str, str]
) -> tuple[bool, list[dict], str]:
    """A switch of the steps (``switch``: a `Step` field, True, False or None where a row does
    not say): each batch's step with it on and off under the same thresholds, and the other
    setting where the geometric mean of its step over the current one's is at least
    ``margin``; the evidence per batch (``names``: the evidence's keys for on and off), and
    why."""
    evidence: list[dict] = []
    on_key, off_key = (f"{n}_items_per_s" for n in names)
    for batch in sorted({s.batch for s in steps}):
        for paths in sorted({(s.block, s.narrow, s.cluster) for s in steps if s.batch == batch}):
            same = [
                s for s in steps if s.batch == batch and (s.block, s.narrow, s.cluster) == paths
            ]
            on = _mean([s.rate for s in same if getattr(s, switch) is True])
            off = _mean([s.rate for s in same if getattr(s, switch) is False])
            if on is not None and off is not None:
                evidence.append({"batch": batch, "paths": list(paths), on_key: on, off_key: off,
                                 "ratio": on / off})  # fmt: skip
    if not evidence:
        return current, evidence, f"no batch measured with {switch} on and off"
    gmean = math.exp(sum(math.log(e["ratio"]) for e in evidence) / len(evidence))
    other = gmean if not current else 1.0 / gmean  # the other setting over the current one
    where = f"geometric mean of on / off {gmean:.3f} over B {[e['batch'] for e in evidence]}"
    if other >= args.margin:
        return not current, evidence, where
    return current, evidence, f"{where}: the other setting does not win by >= {args.margin}x"


def pick_top(steps: list[Step], args: Args) -> tuple[bool, list[dict], str]:
    """``SHARED_TOP``: `pick_switch` over the descents' copy of the tree's top."""
    return pick_switch(steps, "top", bool(args.shared_top), args, ("top", "no_top"))


def pick_siblings(steps: list[Step], args: Args) -> tuple[bool, list[dict], str]:
    """``TAGGED_SIBLINGS``: `pick_switch` over the tagged rows, the leaves' parents from the
    table or not."""
    steps = [s for s in steps if s.tagged]
    current = bool(args.tagged_siblings)
    return pick_switch(steps, "siblings", current, args, ("siblings", "after_leaves"))


def pick_tagged(steps: list[Step], siblings: bool, args: Args) -> tuple[bool, list[dict], str]:
    """``TAGGED_CLAIMS``: `pick_switch` over the cluster update's claims in a tagged table (its
    rows with ``siblings`` as picked) or in the workspace."""
    steps = [s for s in steps if not s.tagged or s.siblings == siblings]
    return pick_switch(steps, "tagged", bool(args.tagged_claims), args, ("tagged", "workspace"))


def pick_own_sample(steps: list[Step], args: Args) -> tuple[int, list[dict], str]:
    """``OWN_SAMPLE_MAX_BATCH``, the evidence per batch (the same thresholds, the sample cuda's
    own call or XLA's code around ``find``), and why."""
    evidence: list[dict] = []
    for batch in sorted({s.batch for s in steps}):
        for paths in sorted({(s.block, s.narrow, s.cluster) for s in steps if s.batch == batch}):
            same = [
                s for s in steps if s.batch == batch and (s.block, s.narrow, s.cluster) == paths
            ]
            own = _mean([s.rate for s in same if s.own is True])
            find = _mean([s.rate for s in same if s.own is False])
            if own is not None and find is not None:
                evidence.append({"batch": batch, "paths": list(paths), "own_items_per_s": own,
                                 "find_items_per_s": find, "ratio": find / own,
                                 "wins": find >= args.margin * own})  # fmt: skip
    if not evidence:
        return args.own_sample_max_batch, evidence, "no batch measured both ways"
    first = _first_of_unbroken_wins(evidence)  # from it the sample around find wins
    if first is None:
        why = f"the sample around find does not win by >= {args.margin}x at the largest batch"
        return args.own_sample_max_batch, evidence, why
    return first - 1, evidence, f"the sample around find wins by >= {args.margin}x from B {first}"


def _first_of_unbroken_wins(evidence: list[dict]) -> int | None:
    """The smallest batch from which every larger measured batch wins (``evidence`` by batch,
    each with ``wins``), or None where the largest does not."""
    first = None
    for e in reversed(evidence):
        if not e["wins"]:
            break
        first = e["batch"]
    return first


def pick_spread(steps: list[Step], args: Args) -> tuple[int, int, list[dict], str]:
    """``SPREAD_MIN_BATCH`` and ``SPREAD_THREADS``, the evidence per batch and threads (the same
    thresholds, cuda's own sample call spread or not), and why."""
    evidence: list[dict] = []
    for batch in sorted({s.batch for s in steps}):
        for paths in sorted({(s.block, s.narrow, s.cluster) for s in steps if s.batch == batch}):
            same = [
                s for s in steps
                if s.batch == batch and (s.block, s.narrow, s.cluster) == paths and s.own
            ]  # fmt: skip
            own = _mean([s.rate for s in same if s.spread == 0])
            for threads in sorted({s.spread for s in same} - {0}):
                spread = _mean([s.rate for s in same if s.spread == threads])
                if own is not None and spread is not None:
                    evidence.append({"batch": batch, "paths": list(paths), "threads": threads,
                                     "own_items_per_s": own, "spread_items_per_s": spread,
                                     "ratio": spread / own,
                                     "wins": spread >= args.margin * own})  # fmt: skip
    current = (args.spread_min_batch, args.spread_threads)
    if not evidence:
        return *current, evidence, "no batch measured with the spread sample and without"
    gmeans = {
        t: math.exp(statistics.fmean(math.log(e["ratio"]) for e in evidence if e["threads"] == t))
        for t in {e["threads"] for e in evidence}
    }
    threads = max(gmeans, key=lambda t: gmeans[t])
    first = _first_of_unbroken_wins([e for e in evidence if e["threads"] == threads])
    if first is None:
        why = f"the best spread ({threads} threads a block, geometric mean {gmeans[threads]:.3f})"
        return *current, evidence, f"{why} does not win by >= {args.margin}x at the largest batch"
    return first, threads, evidence, (
        f"the spread sample in blocks of {threads} wins by >= {args.margin}x from B {first}"
    )  # fmt: skip


def show(evidence: list[dict], label: str, ours: str, theirs: str) -> None:
    """Prints each batch's A/B of ``evidence``: ``label`` (formatted with the row), the
    ``<ours>_items_per_s`` against the ``<theirs>_items_per_s``, and their ratio."""
    for e in evidence:
        print(f"B {e['batch']:6d}: {label.format(**e)}{e[ours + '_items_per_s'] / 1e6:9.1f}M vs "
              f"{e[theirs + '_items_per_s'] / 1e6:9.1f}M = {e['ratio']:.2f}x")  # fmt: skip


def library_defaults(args: Args) -> Args:
    """``args`` with every current value left None filled from ``drlhet.backends.cuda``."""
    from drlhet.backends import cuda

    return dataclasses.replace(
        args,
        block_max_batch=(
            cuda.BLOCK_MAX_BATCH if args.block_max_batch is None else args.block_max_batch
        ),
        cluster_max_batch=(
            cuda.CLUSTER_MAX_BATCH if args.cluster_max_batch is None else args.cluster_max_batch
        ),
        narrow_max_nodes=(
            cuda.NARROW_MAX_NODES if args.narrow_max_nodes is None else args.narrow_max_nodes
        ),
        shared_top=cuda.SHARED_TOP if args.shared_top is None else args.shared_top,
        tagged_claims=cuda.TAGGED_CLAIMS if args.tagged_claims is None else args.tagged_claims,
        tagged_siblings=(
            cuda.TAGGED_SIBLINGS if args.tagged_siblings is None else args.tagged_siblings
        ),
        own_sample_max_batch=(
            cuda.OWN_SAMPLE_MAX_BATCH
            if args.own_sample_max_batch is None
            else args.own_sample_max_batch
        ),
        spread_min_batch=(
            cuda.SPREAD_MIN_BATCH if args.spread_min_batch is None else args.spread_min_batch
        ),
        spread_threads=cuda.SPREAD_THREADS if args.spread_threads is None else args.spread_threads,
    )


def report(r: dict) -> None:
    """Prints each pick of `main`'s result ``r``: its evidence, then the setting and why."""
    print(
        f"== the cluster path against the per-level path, step items/s (measured), "
        f"margin {r['margin']}"
    )
    show(r["cluster_evidence"], "", "cluster", "per_level")
    print(f"CLUSTER_MAX_BATCH = {r['cluster_max_batch']} ({r['cluster_why']})")
    for e in r["narrow_evidence"]:
        print(f"NARROW_MAX_NODES {e['narrow_max_nodes']:6d}: geometric mean "
              f"{e['gmean_items_per_s'] / 1e6:9.1f}M over B {e['batches']}")  # fmt: skip
    print(f"NARROW_MAX_NODES = {r['narrow_max_nodes']} ({r['narrow_why']})")
    for key, label, ours, theirs in (
        ("shared_top", "top copied ", "top", "no_top"),
        ("tagged_siblings", "tagged, parents from the table ", "siblings", "after_leaves"),
        ("tagged_claims", "claims in a tagged table ", "tagged", "workspace"),
        ("own_sample", "sample around find, against the own call ", "find", "own"),
    ):
        show(r[f"{key}_evidence"], label, ours, theirs)
        setting = key if key in r else f"{key}_max_batch"
        print(f"{setting.upper()} = {r[setting]} ({r[f'{key}_why']})")
    show(r["spread_evidence"], "spread, {threads} threads a block, against the own call ",
         "spread", "own")  # fmt: skip
    print(f"SPREAD_MIN_BATCH = {r['spread_min_batch']}, SPREAD_THREADS = {r['spread_threads']} "
          f"({r['spread_why']})")  # fmt: skip


def _refuse(why: str) -> NoReturn:
    """Ends the script on bad input, as every experiment does (checked_cli.py): ``<script>:
    error: <why>`` on stderr, exit status 2."""
    print(f"{Path(sys.argv[0]).stem}: error: {why}", file=sys.stderr)
    raise SystemExit(2)


def main(args: Args) -> dict:
    args = library_defaults(args)
    try:
        steps = read_steps(args.rows, args.capacity, args.branching)
    except ValueError as err:
        _refuse(str(err))
    if not steps:
        files = ", ".join(map(str, args.rows)) or "no file"
        _refuse(
            f"no fused cuda step rows at capacity {args.capacity}, K {args.branching} in {files}"
        )
    siblings, siblings_evidence, siblings_why = pick_siblings(steps, args)
    tagged, tagged_evidence, tagged_why = pick_tagged(steps, siblings, args)
    # the other picks over the rows with the claims switches as they are now
    now = (args.tagged_claims, args.tagged_claims and args.tagged_siblings)
    steps = [s for s in steps if (s.tagged, s.tagged and s.siblings) == now]
    least, threads, spread_evidence, spread_why = pick_spread(steps, args)
    # the sample around find against the own call as picked: spread from `least`, or not
    as_picked = [s for s in steps if s.spread == (threads if s.batch >= least else 0)]
    own, own_evidence, own_why = pick_own_sample(
        [s for s in steps if s.own is False] + [s for s in as_picked if s.own is not False], args
    )
    # the other picks: cuda's own sample call, not spread
    steps = [s for s in steps if s.own is not False and s.spread == 0]
    top, top_evidence, top_why = pick_top(steps, args)
    same_top = [s for s in steps if s.top is None or s.top == args.shared_top]
    cluster, cluster_evidence, cluster_why = pick_cluster(same_top, args)
    narrow, narrow_evidence, narrow_why = pick_narrow(same_top, cluster, args)
    result = {
        "cluster_max_batch": cluster, "cluster_why": cluster_why,
        "cluster_evidence": cluster_evidence,
        "narrow_max_nodes": narrow, "narrow_why": narrow_why, "narrow_evidence": narrow_evidence,
        "shared_top": top, "shared_top_why": top_why, "shared_top_evidence": top_evidence,
        "tagged_claims": tagged, "tagged_claims_why": tagged_why,
        "tagged_claims_evidence": tagged_evidence,
        "tagged_siblings": siblings, "tagged_siblings_why": siblings_why,
        "tagged_siblings_evidence": siblings_evidence,
        "own_sample_max_batch": own, "own_sample_why": own_why,
        "own_sample_evidence": own_evidence,
        "spread_min_batch": least, "spread_threads": threads, "spread_why": spread_why,
        "spread_evidence": spread_evidence,
        "capacity": args.capacity, "branching": args.branching, "margin": args.margin,
        "measured": "picked from the rows' items/s, measured where they were written",
    }  # fmt: skip
    report(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    if args.env_out is not None:
        args.env_out.parent.mkdir(parents=True, exist_ok=True)
        args.env_out.write_text(
            f"CUDA_CLUSTER_MAX_BATCH={cluster}\nCUDA_NARROW_MAX_NODES={narrow}\n"
            f"CUDA_SHARED_TOP={int(top)}\nCUDA_TAGGED_CLAIMS={int(tagged)}\n"
            f"CUDA_TAGGED_SIBLINGS={int(siblings)}\n"
            f"CUDA_OWN_SAMPLE_MAX_BATCH={own}\n"
            f"CUDA_SPREAD_MIN_BATCH={least}\nCUDA_SPREAD_THREADS={threads}\n"
        )
    return result


if __name__ == "__main__":
    checked_cli.run(Args, main, {})

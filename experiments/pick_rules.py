"""pick_cuda_paths.py's rules: each threshold or switch of the cuda paths picked from the
measured `Step`s (items/s), with its evidence (a list of dicts, per batch or value) and why.

Imports no jax.
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pick_cuda_paths import Args
    from pick_steps import Step


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
    # no current value is None: pick_cuda_paths.library_defaults filled them
    assert args.block_max_batch is not None and args.cluster_max_batch is not None
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
    # no current value is None: pick_cuda_paths.library_defaults filled them
    assert args.block_max_batch is not None and args.narrow_max_nodes is not None
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


def pick_wide(steps: list[Step], args: Args) -> tuple[bool, list[dict], str]:
    """``CLUSTER_BLOCKS`` past 8: `pick_switch` over the cluster path in clusters of 16 blocks
    or of 8 (the rows with the claims switches as they are now)."""
    now = (args.tagged_claims, args.tagged_claims and args.tagged_siblings)
    steps = [s for s in steps if (s.tagged, s.tagged and s.siblings) == now]
    current = (args.cluster_blocks or 8) > 8
    return pick_switch(steps, "wide", current, args, ("wide", "eight"))


def pick_sorted(steps: list[Step], args: Args) -> tuple[bool, list[dict], str]:
    """``SORTED_RUNS``: `pick_switch` over the cluster update of a sorted batch run by run or by
    its claims (the rows with the claims switches and the cluster's width as they are now)."""
    now = (args.tagged_claims, args.tagged_claims and args.tagged_siblings)
    wide = (args.cluster_blocks or 8) > 8
    steps = [s for s in steps if (s.tagged, s.tagged and s.siblings) == now and s.wide == wide]
    return pick_switch(steps, "sorted", bool(args.sorted_runs), args, ("sorted", "claims"))


def pick_own_sample(steps: list[Step], args: Args) -> tuple[int, list[dict], str]:
    """``OWN_SAMPLE_MAX_BATCH``, the evidence per batch (the same thresholds, the sample cuda's
    own call or XLA's code around ``find``), and why."""
    # no current value is None: pick_cuda_paths.library_defaults filled them
    assert args.own_sample_max_batch is not None
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
    # no current value is None: pick_cuda_paths.library_defaults filled them
    assert args.spread_min_batch is not None and args.spread_threads is not None
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

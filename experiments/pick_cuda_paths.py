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
- ``SORTED_RUNS`` (the cluster update of a sorted batch run by run, or by its claims;
  ``gpu_checks.sh sorted``, the rows as ``drlhet-cuda-sorted``): the same rule as the tagged
  claims, over the rows of the current claims and width.
- ``CLUSTER_BLOCKS`` (the cluster path's clusters of 16 blocks or of 8; ``gpu_checks.sh wide``,
  the rows as ``drlhet-cuda-wide``): 16 where the geometric mean of its steps over those of 8
  wins by ``margin`` (8 where 8 wins so, from 16), else the current width; the other picks
  weigh the rows of the current width.

Where the rows cannot decide, the current value stays, and the reason is printed. The choice is
*measured* (on the GPU that wrote the rows), for those shapes only (capacity, K). It prints the
evidence, writes it as JSON, and writes ``CUDA_CLUSTER_MAX_BATCH=...``,
``CUDA_NARROW_MAX_NODES=...``, ``CUDA_SHARED_TOP=0|1``, ``CUDA_TAGGED_CLAIMS=0|1``,
``CUDA_TAGGED_SIBLINGS=0|1``, ``CUDA_OWN_SAMPLE_MAX_BATCH=...``, ``CUDA_SPREAD_MIN_BATCH=...``,
``CUDA_SPREAD_THREADS=...``, ``CUDA_CLUSTER_BLOCKS=...`` and ``CUDA_SORTED_RUNS=0|1`` lines for
``gpu_checks.sh`` to read before its later stages (``experiments/with_cuda_paths.py`` runs a command
with them). The current values are the library's unless given. Rows of the update paths that the
library no longer has (one cluster per tree whose blocks each own a region of the tree, the claims
in the cluster's shared memory: measured slower or no faster on an H100 and removed) are skipped.
The rows are read by ``pick_steps.py``; the rule of each pick is in ``pick_rules.py``.

Usage:
  python experiments/pick_cuda_paths.py --rows cluster_*.json narrow_*.json top_*.json \\
      tagged.json find.json spread.json wide.json sorted.json \\
      --env-out cuda_paths.env --out cuda_paths.json
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import NoReturn

import checked_cli
from pick_rules import (
    pick_cluster,
    pick_narrow,
    pick_own_sample,
    pick_siblings,
    pick_sorted,
    pick_spread,
    pick_tagged,
    pick_top,
    pick_wide,
)
from pick_steps import read_steps


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
    cluster_blocks: int | None = None
    """The current ``CLUSTER_BLOCKS`` (None: the library's), kept where the rows cannot
    decide."""
    sorted_runs: bool | None = None
    """The current ``SORTED_RUNS`` (None: the library's), kept where the rows cannot decide."""
    margin: float = 1.03
    """How much faster (step items/s) a change must be than what it replaces."""
    out: Path = Path("cuda_paths.json")
    env_out: Path | None = None


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
        cluster_blocks=cuda.CLUSTER_BLOCKS if args.cluster_blocks is None else args.cluster_blocks,
        sorted_runs=cuda.SORTED_RUNS if args.sorted_runs is None else args.sorted_runs,
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
    show(r["wide_evidence"], "clusters of 16 blocks against 8 ", "wide", "eight")
    print(f"CLUSTER_BLOCKS = {r['cluster_blocks']} ({r['wide_why']})")
    show(r["sorted_evidence"], "sorted runs against the claims ", "sorted", "claims")
    print(f"SORTED_RUNS = {r['sorted_runs']} ({r['sorted_why']})")
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
    wide, wide_evidence, wide_why = pick_wide(steps, args)
    runs, sorted_evidence, sorted_why = pick_sorted(steps, args)
    # the other picks over the rows with the cluster's width and the sorted runs as they are now
    steps = [s for s in steps if s.wide == ((args.cluster_blocks or 8) > 8)]
    steps = [s for s in steps if s.sorted == bool(args.sorted_runs)]
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
    # 16 where clusters of 16 won, 8 where 8 won, else the current width
    blocks = 16 if wide else (8 if (args.cluster_blocks or 8) > 8 else args.cluster_blocks)
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
        "cluster_blocks": blocks, "wide_why": wide_why, "wide_evidence": wide_evidence,
        "sorted_runs": runs, "sorted_why": sorted_why, "sorted_evidence": sorted_evidence,
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
            f"CUDA_CLUSTER_BLOCKS={blocks}\nCUDA_SORTED_RUNS={int(runs)}\n"
        )
    return result


if __name__ == "__main__":
    checked_cli.run(Args, main, {})

"""bench_replay.py's cuda paths: the switches of `drlhet.backends.cuda` a run sets, its A/B arms,
and what each row records of them.

The options ``--cuda-*`` set the backend's switches for the whole run (`set_cuda_switches`);
``--cuda-tagged-ab``, ``--cuda-wide-ab``, ``--cuda-sorted-ab``, ``--cuda-find-ab`` and
``--cuda-spread-ab`` add arms beside ``drlhet-cuda`` (`ab_arms`); every row says which path it
ran (`cuda_path`).

Imports no jax at import time: the backend is imported only where a switch is read or set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench_replay import Args

CUDA_SWITCHES = {  # option -> `drlhet.backends.cuda`'s switch, set where the option is given
    "cuda_block_max_batch": "BLOCK_MAX_BATCH",
    "cuda_narrow_max_nodes": "NARROW_MAX_NODES",
    "cuda_cluster_max_batch": "CLUSTER_MAX_BATCH",
    "cuda_tagged_claims": "TAGGED_CLAIMS",
    "cuda_tagged_siblings": "TAGGED_SIBLINGS",
    "cuda_own_sample_max_batch": "OWN_SAMPLE_MAX_BATCH",
    "cuda_spread_min_batch": "SPREAD_MIN_BATCH",
    "cuda_spread_threads": "SPREAD_THREADS",
    "cuda_cluster_blocks": "CLUSTER_BLOCKS",
    "cuda_sorted_runs": "SORTED_RUNS",
}

LEAST = {option: 0 for option in CUDA_SWITCHES if option.endswith(("_batch", "_nodes"))}
LEAST["cuda_cluster_blocks"] = 1
"""The smallest value of each cuda threshold (`checked_cli.refused_counts`; None: the
library's), as experiments/with_cuda_paths.py takes them."""

CLAIMS_ARMS = {
    "drlhet-cuda-tagged": ("cuda_tagged_ab", {"TAGGED_CLAIMS": True, "TAGGED_SIBLINGS": False}),
    "drlhet-cuda-siblings": ("cuda_tagged_ab", {"TAGGED_CLAIMS": True, "TAGGED_SIBLINGS": True}),
}
"""The cuda claims A/Bs: each arm's row name, the option that adds it, and the switches of
`drlhet.backends.cuda` it sets (its rows' ``cuda_<switch>`` say so)."""
WIDE_ARMS = {"drlhet-cuda-wide": ("cuda_wide_ab", {"CLUSTER_BLOCKS": 16})}
"""The cluster's width A/B: the cluster path in clusters of 16 blocks (as `CLAIMS_ARMS`)."""
SORTED_ARMS = {"drlhet-cuda-sorted": ("cuda_sorted_ab", {"SORTED_RUNS": True})}
"""The sorted runs' A/B: the cluster update of a sorted batch run by run (as `CLAIMS_ARMS`)."""
SWITCH_ARMS = CLAIMS_ARMS | WIDE_ARMS | SORTED_ARMS

# The switches of `drlhet.backends.cuda` every cuda row records (``cuda_<switch>``, as the
# library had them when the row ran), whether or not this run's options set them.
CUDA_PATH_SWITCHES = ("BLOCK_MAX_BATCH", "NARROW_MAX_NODES", "CLUSTER_MAX_BATCH", "TAGGED_CLAIMS",
                      "TAGGED_SIBLINGS", "SPREAD_MIN_BATCH", "SPREAD_THREADS",
                      "CLUSTER_BLOCKS", "SORTED_RUNS")  # fmt: skip


def set_cuda_switches(args: Args) -> None:
    """The cuda backend's switches that this run's options set, for the whole run."""
    given = {name: getattr(args, option) for option, name in CUDA_SWITCHES.items()
             if getattr(args, option) is not None}  # fmt: skip
    if not args.cuda_shared_top:
        given["SHARED_TOP"] = False
    if given:
        from drlhet.backends import cuda

        for name, value in given.items():
            setattr(cuda, name, value)


Arm = tuple[str, dict[str, bool], Mapping[str, int | bool]]
"""An A/B arm: ``(impl, drlhet_ops variant, cuda switches its runs set)``."""


def ab_arms(args: Args) -> list[Arm]:
    """The in-process A/B arms beside ``drlhet-cuda`` that ``args`` asks for, in their order:
    ``(impl, drlhet_ops variant, cuda switches its runs set)``."""
    arms: list[Arm] = [(impl, {}, settings) for impl, (flag, settings) in SWITCH_ARMS.items()
            if getattr(args, flag)]  # fmt: skip
    if args.cuda_find_ab:
        arms.append(("drlhet-cuda-find", {"own_sample": False}, {}))
    for threads in args.cuda_spread_ab:
        spread = {"SPREAD_MIN_BATCH": 1, "SPREAD_THREADS": threads}
        arms.append((f"drlhet-cuda-spread{threads}", {}, spread))
    return arms


def cuda_path(args: Args, impl: str, batch: int) -> dict:
    """The cuda settings a row ran with (``cuda_<switch>``; None for other backends)."""
    names = CUDA_PATH_SWITCHES
    if not impl.startswith("drlhet-cuda"):
        return {f"cuda_{n.lower()}": None for n in names} | {
            "cuda_key_targets": None, "cuda_shared_top": None, "cuda_own_sample": None
        }  # fmt: skip
    from drlhet.backends import cuda

    # the sample call (weigh) is the backend's
    spread = re.fullmatch(r"drlhet-cuda-spread(\d+)", impl)
    own_sample = impl == "drlhet-cuda" or impl in SWITCH_ARMS or spread is not None
    own_sample = own_sample and args.cuda_own_sample and batch <= cuda.OWN_SAMPLE_MAX_BATCH
    key_targets = args.cuda_key_targets and cuda.KEY_TARGETS and own_sample
    shared_top = bool(cuda.SHARED_TOP) and own_sample
    arm = {}
    if impl in SWITCH_ARMS:
        arm = {f"cuda_{n.lower()}": int(on) for n, on in SWITCH_ARMS[impl][1].items()}
    if spread is not None:
        arm = {"cuda_spread_min_batch": 1, "cuda_spread_threads": int(spread[1])}
    return {f"cuda_{n.lower()}": int(getattr(cuda, n)) for n in names} | arm | {
        "cuda_key_targets": key_targets, "cuda_shared_top": shared_top,
        "cuda_own_sample": own_sample,
    }  # fmt: skip

"""Runs a Python module or script with the CUDA backend's path thresholds set.

``drlhet.backends.cuda`` reads ``BLOCK_MAX_BATCH``, ``CLUSTER_MAX_BATCH``, ``OWN_SAMPLE_MAX_BATCH``,
``SPREAD_MIN_BATCH``, ``SPREAD_THREADS``, ``NARROW_MAX_NODES``, ``KEY_TARGETS``, ``SHARED_TOP``,
``TAGGED_CLAIMS``, ``TAGGED_SIBLINGS``, ``CLUSTER_BLOCKS`` and ``SORTED_RUNS`` when traced;
``bench_replay.py`` has flags for them, the other commands do not. This wrapper sets them, then
runs the command in the same process, so that ``experiments/gpu_checks.sh`` can train and
profile with the thresholds its ``pick`` stage chose (``experiments/pick_cuda_paths.py``) before
they become the library's defaults, and without a part that its ``tests`` stage found wrong on
that GPU (``experiments/triage_gpu_tests.py``).

Usage:
  python experiments/with_cuda_paths.py --cluster-max-batch 16384 -- -m drlhet train ...
  python experiments/with_cuda_paths.py --narrow-max-nodes 1024 -- experiments/profile_gpu.py
  python experiments/with_cuda_paths.py --no-key-targets -- -m drlhet train ...
  python experiments/with_cuda_paths.py --no-shared-top -- experiments/profile_gpu.py
  python experiments/with_cuda_paths.py --tagged-claims -- -m drlhet train ...
  python experiments/with_cuda_paths.py --no-tagged-claims -- -m drlhet train ...
  python experiments/with_cuda_paths.py --tagged-claims --tagged-siblings -- -m drlhet train ...
  python experiments/with_cuda_paths.py --cluster-blocks 16 -- -m drlhet train ...
  python experiments/with_cuda_paths.py --sorted-runs -- -m drlhet train ...
"""

from __future__ import annotations

import dataclasses
import runpy
import sys
from typing import Annotated, NoReturn

import tyro

NAMES = (
    "block_max_batch",
    "cluster_max_batch",
    "narrow_max_nodes",
    "own_sample_max_batch",
    "spread_min_batch",
    "spread_threads",
    "cluster_blocks",
)


@dataclasses.dataclass
class Args:
    block_max_batch: int | None = None
    """``drlhet.backends.cuda.BLOCK_MAX_BATCH`` (None: the library's)."""
    cluster_max_batch: int | None = None
    """``drlhet.backends.cuda.CLUSTER_MAX_BATCH`` (None: the library's; 0: off)."""
    narrow_max_nodes: int | None = None
    """``drlhet.backends.cuda.NARROW_MAX_NODES`` (None: the library's)."""
    own_sample_max_batch: int | None = None
    """``drlhet.backends.cuda.OWN_SAMPLE_MAX_BATCH`` (None: the library's): above it the sample
    is the buffer's XLA code around cuda's ``find``."""
    spread_min_batch: int | None = None
    """``drlhet.backends.cuda.SPREAD_MIN_BATCH`` (None: the library's): from it the sample call
    is one cooperative launch spread over the GPU."""
    spread_threads: int | None = None
    """``drlhet.backends.cuda.SPREAD_THREADS`` (None: the library's): whole warps, 32 to 1024."""
    cluster_blocks: int | None = None
    """``drlhet.backends.cuda.CLUSTER_BLOCKS`` (None: the library's): blocks of each tree's
    cluster on the cluster path, 1 to 16."""
    no_key_targets: bool = False
    """Turn ``drlhet.backends.cuda.KEY_TARGETS`` off: XLA draws the sample's targets (without
    the flag: the library's setting)."""
    no_shared_top: bool = False
    """Turn ``drlhet.backends.cuda.SHARED_TOP`` off: the sample's descents read every level from
    the tree in global memory (without the flag: the library's setting)."""
    # one flag each, without tyro's --no- twins: --no-tagged-claims is the switch off
    tagged_claims: Annotated[bool, tyro.conf.FlagCreatePairsOff] = False
    """Turn ``drlhet.backends.cuda.TAGGED_CLAIMS`` on: the cluster path's update claims its
    leaves in a table kept by its custom call (without the flag: the library's setting)."""
    no_tagged_claims: Annotated[bool, tyro.conf.FlagCreatePairsOff] = False
    """Turn ``drlhet.backends.cuda.TAGGED_CLAIMS`` off: the cluster path's update claims its
    leaves in the call's workspace (without the flag: the library's setting)."""
    tagged_siblings: bool = False
    """Turn ``drlhet.backends.cuda.TAGGED_SIBLINGS`` on: with the tagged claims, the winners sum
    their leaves' parents from the table (without the flag: the library's setting)."""
    sorted_runs: bool = False
    """Turn ``drlhet.backends.cuda.SORTED_RUNS`` on: the cluster path's update first tries a
    batch of sorted indices run by run (without the flag: the library's setting)."""


def apply(args: Args) -> dict[str, int]:
    """Sets the given thresholds (and ``KEY_TARGETS``, ``SHARED_TOP``, ``TAGGED_CLAIMS``,
    ``TAGGED_SIBLINGS``) in ``drlhet.backends.cuda``; returns every one's value. A negative one,
    or both ``--tagged-claims`` and ``--no-tagged-claims``, raises ``ValueError`` naming it,
    before anything is set."""
    for name in NAMES:
        value = getattr(args, name)
        if value is not None and value < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {value}")
    threads = args.spread_threads
    if threads is not None and not (32 <= threads <= 1024 and threads % 32 == 0):
        raise ValueError(f"--spread-threads must be whole warps, 32 to 1024, got {threads}")
    if args.tagged_claims and args.no_tagged_claims:
        raise ValueError("give --tagged-claims or --no-tagged-claims, not both")
    if args.cluster_blocks is not None and not 1 <= args.cluster_blocks <= 16:
        raise ValueError(f"--cluster-blocks must be 1 to 16, got {args.cluster_blocks}")
    from drlhet.backends import cuda

    for name in NAMES:
        if getattr(args, name) is not None:
            setattr(cuda, name.upper(), int(getattr(args, name)))
    if args.no_key_targets:
        cuda.KEY_TARGETS = False
    if args.no_shared_top:
        cuda.SHARED_TOP = False
    if args.tagged_claims or args.no_tagged_claims:
        cuda.TAGGED_CLAIMS = args.tagged_claims
    if args.tagged_siblings:
        cuda.TAGGED_SIBLINGS = True
    if args.sorted_runs:
        cuda.SORTED_RUNS = True
    switches = ("key_targets", "shared_top", "tagged_claims", "tagged_siblings", "sorted_runs")
    return {name: int(getattr(cuda, name.upper())) for name in (*NAMES, *switches)}


def _refuse(why: str) -> NoReturn:
    """One line and exit status 2, as every experiment's bad input (checked_cli.py)."""
    print(f"with_cuda_paths: error: {why}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str]) -> None:
    if "--" not in argv and ("-h" in argv or "--help" in argv):
        tyro.cli(Args, args=argv)  # prints the options and exits 0
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        _refuse("give the command after `--` (-m MODULE ... or SCRIPT ...)")
    split = argv.index("--")
    command = argv[split + 1 :]
    if command[0] == "-m" and len(command) < 2:
        _refuse("-m needs a module name")
    from drlhet.integers import registry  # these two: the standard library and tyro, no jax
    from drlhet.parse_errors import parse_or_refuse

    def parse() -> Args:
        return tyro.cli(Args, args=argv[:split], registry=registry())

    args = parse_or_refuse(parse, _refuse)  # one line
    try:
        values = apply(args)
    except ValueError as e:
        _refuse(str(e))
    print("cuda paths: " + ", ".join(f"{k.upper()} {v}" for k, v in values.items()), flush=True)
    if command[0] == "-m":
        sys.argv = [command[1], *command[2:]]
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = command
        runpy.run_path(command[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])

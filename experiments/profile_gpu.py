"""The loop's primitives measured on this machine's GPU, for the DSE (JSON, one row per backend).

docs/design.md section 5: a device that is present is profiled, not modeled. For each training
shape (``--shapes``: the DSE's default DQN + PER CartPole shape, and a large-batch one) and each
replay backend that runs on the GPU here (``jax`` and ``cuda``), every primitive (actors, insert,
sample, train, update) is timed inside a compiled ``lax.scan`` on the GPU, exactly as
`drlhet.dse.profile.compute_figures` times them on a CPU device (median, min and max of the
repeats, seconds per call). The output is what ``drlhet dse --gpu-profile FILE`` reads: its rows
replace the sheet model's costs of the GPU they were measured on (`drlhet.dse.gpu_profile`).

Usage (on a machine with a GPU and jax[cuda]):
  python experiments/profile_gpu.py --out results/gpu_profile_h100.json

Exit status: 0 profiled (the rows written); 2 bad input (one line, nothing measured:
``checked_cli``); `NO_GPU` (77) no GPU: JAX has no ``gpu`` device here (no GPU, or a jaxlib
without CUDA), said in one line on stderr, nothing measured or written; 1 a failure while
profiling. ``gpu_checks.sh``'s ``profile`` stage logs the status (``== profile: exit 77``) and
the line; 77 is neither a failure's 1 nor ``timeout``'s 124 or 137 there.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

import checked_cli
import jax

from drlhet import backends
from drlhet.backends.base import GPU
from drlhet.dse.gpu_profile import profile_row, sheet_for_device
from drlhet.dse.key import ProfileKey
from drlhet.dse.profile import compute_figures

SHAPES = {
    "default": ProfileKey(),
    "large": ProfileKey(hidden=(256, 256), batch=4096, capacity=1 << 20, num_envs=64),
    **{
        f"b{b}_c{c.bit_length() - 1}": ProfileKey(batch=b, capacity=c)
        for b in (64, 256)
        for c in (1 << 17, 1 << 20)
    },
}
"""The shapes that can be profiled: the DSE's default run, a large-batch, large-buffer,
large-net one, and the four of the DSE's validation (``b64_c17`` ... ``b256_c20``: DQN 64x64,
B 64 / 256, 2^17 / 2^20 leaves, as experiments/validate_dse.py and fig_mapping.py use)."""


@dataclasses.dataclass
class Args:
    shapes: tuple[str, ...] = ("default", "large")
    """Which of `SHAPES` to profile."""
    backends: tuple[str, ...] = ("jax", "cuda")
    """Replay backends to profile on the GPU (one that does not load is skipped, with why)."""
    repeats: int = 7
    steps: int = 200
    """Calls per timed scan."""
    out: Path = Path("results/raw/gpu_profile.json")


NO_GPU = 77
"""Exit status without a GPU (the status that test harnesses such as automake's read as
"skipped")."""


def first_gpu() -> jax.Device:
    """JAX's first ``gpu`` device; without one, says so in one line on stderr (what was looked
    for, and the platforms JAX has) and exits with `NO_GPU`."""
    try:
        return jax.devices(GPU)[0]
    except RuntimeError:
        pass
    try:
        platforms = ", ".join(sorted({d.platform for d in jax.devices()}))
    except RuntimeError:  # JAX_PLATFORMS names none that starts
        platforms = "none"
    print(
        f"profile_gpu: no GPU: JAX has no {GPU!r} device here (jax.devices({GPU!r}); its "
        f"platforms: {platforms}); nothing profiled",
        file=sys.stderr,
    )
    raise SystemExit(NO_GPU)


def main(args: Args) -> list[dict]:
    gpu = first_gpu()
    sheet = sheet_for_device(gpu.device_kind)
    print(
        f"GPU: {gpu.device_kind} (device sheet: {sheet or 'none matches'}); jax {jax.__version__}"
    )
    rows = []
    for shape in args.shapes:
        for name in args.backends:
            try:
                backends.tree_ops(name)
            except backends.BackendUnavailable as e:
                print(f"note: backend {name} unavailable: {e}")
                continue
            key = dataclasses.replace(SHAPES[shape], backend=name)
            t = time.perf_counter()
            figs = compute_figures(key, gpu, repeats=args.repeats, steps=args.steps)
            rows.append(
                profile_row(
                    key.name(),
                    name,
                    gpu.device_kind,
                    sheet,
                    figs,
                    shape=dataclasses.asdict(SHAPES[shape]),
                    seconds_to_profile=time.perf_counter() - t,
                    jax=jax.__version__,
                    host=platform.node(),
                )
            )
            us = ", ".join(f"{p} {v['median'] * 1e6:.1f}" for p, v in figs.items())
            print(f"{key.name()}: us per call (median, measured on the GPU): {us}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    print(f"wrote {len(rows)} rows to {args.out}")
    return rows


LEAST = {"repeats": 1, "steps": 1}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    checked_cli.run(
        Args, main, LEAST, lambda a: checked_cli.unknown_names("--shapes", a.shapes, SHAPES)
    )

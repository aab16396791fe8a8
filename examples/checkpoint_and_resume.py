"""Checkpoint a run, stop it early, resume it, and get the uninterrupted run's result.

Shows the Python side of ``drlhet train --checkpoint-every`` / ``--resume``:

* `drlhet.checkpoint_saving` into a `drlhet.Checkpoints` folder writes the whole training
  state (agents and optimizers, replay storage and sum tree, RNG keys, counters) after every
  ``every``-th chunk, with the configuration a resume is checked against;
* ``stop_asked`` (a ``() -> bool``, e.g. a flag a signal handler sets) ends the run after the
  chunk it is in, that chunk saved, by raising `drlhet.Stopped`;
* `drlhet.Checkpoints.restore` reads the newest intact checkpoint back against the state's
  shapes (`drlhet.initial_example`), and `drlhet.Start.from_saved` resumes from
  it (refusing a configuration other than the saved one).

A resumed run goes on bit for bit as the run that was not stopped; the example runs both and
prints whether their evaluation returns and final agent parameters are identical.

Run it with::

    python examples/checkpoint_and_resume.py          # 2 seeds, 4 chunks of 2,000 env steps
    python examples/checkpoint_and_resume.py --quick  # a few seconds
    python examples/checkpoint_and_resume.py --dir /tmp/ckpts   # keep the checkpoints
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import jax
import numpy as np

import drlhet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=9_000, help="env steps per seed")
    parser.add_argument("--eval-every", type=int, default=2_000)
    parser.add_argument("--every", type=int, default=1, help="checkpoint every N chunks")
    parser.add_argument("--dir", type=Path, help="checkpoint folder (default: a temporary one)")
    parser.add_argument("--quick", action="store_true", help="a short run (3 chunks)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.eval_every = 2_500, 500

    cfg = drlhet.TrainConfig(
        env="CartPole-v1",
        seeds=args.seeds,
        steps=args.steps,
        eval_every=args.eval_every,
        warmup=1_000,
    )
    with tempfile.TemporaryDirectory() as tmp:
        # The three runs below compile the same programs. Unlike `drlhet train`, `drlhet.run`
        # leaves JAX's persistent compilation cache as it is (off by default); turned on here
        # (in the temporary folder), the second and third runs load what the first compiled.
        drlhet.enable_compilation_cache(Path(tmp) / "compiled")
        folder = (args.dir or Path(tmp)) / "checkpoints"
        demo(cfg, folder, args.every)


def demo(cfg: drlhet.TrainConfig, folder: Path, every: int) -> None:
    # 1. The reference: the whole run, uninterrupted.
    full_states, full_rows = drlhet.run(cfg)
    print(
        f"uninterrupted run: {len(full_rows)} chunks, final eval returns per seed "
        f"{rounded(full_rows[-1]['eval_return'])}"
    )

    # 2. The same run, with checkpoints, asked to stop while it runs. Here the request is a
    #    flag set once chunk 0 is reported; a real program would set it from a signal handler.
    #    `stop_asked` is read after each chunk, and again once `on_chunk` has seen its row, so
    #    this one ends the run after chunk 0, which is saved.
    store = drlhet.Checkpoints(folder, keep=2)

    stop = {"asked": False}

    def on_chunk(row: dict) -> None:
        print(f"  chunk {row['chunk']} done: eval returns {rounded(row['eval_return'])}")
        stop["asked"] = True

    print(f"run with checkpoints every {every} chunk(s), a stop asked once chunk 0 is in:")
    try:
        drlhet.run(
            cfg,
            on_chunk=on_chunk,
            saving=drlhet.checkpoint_saving(store, cfg, every=every),
            stop_asked=lambda: stop["asked"],
        )
        raise SystemExit("the run was not stopped: give it more chunks (--steps)")
    except drlhet.Stopped as e:
        print(f"  run ended by Stopped: {e} (e.chunk {e.chunk}, e.saved {e.saved})")

    # 3. Resume from the newest good checkpoint. `initial_example(cfg)` gives the shapes and
    #    dtypes the checkpoint must hold (nothing is computed).
    saved = store.restore(drlhet.initial_example(cfg))
    print(f"restored chunk {saved.chunk} from {saved.path} ({len(saved.rows)} rows in it)")
    resumed_states, resumed_rows = drlhet.run(cfg, start=drlhet.Start.from_saved(saved))
    rows = saved.rows + resumed_rows
    print(
        f"resumed run: chunks {[r['chunk'] for r in resumed_rows]}, final eval returns per "
        f"seed {rounded(rows[-1]['eval_return'])}"
    )

    # 4. Compare with the uninterrupted run.
    same_returns = [r["eval_return"] for r in rows] == [r["eval_return"] for r in full_rows]
    same_params = all(
        np.array_equal(a, b)
        for a, b in zip(
            jax.tree.leaves(jax.device_get(full_states.agent)),
            jax.tree.leaves(jax.device_get(resumed_states.agent)),
            strict=True,
        )
    )
    print(f"eval returns of every chunk match the uninterrupted run: {same_returns}")
    print(f"final agent parameters and optimizer state bit-identical: {same_params}")


def rounded(values: list[float]) -> list[float]:
    return [round(v, 1) for v in values]


if __name__ == "__main__":
    main()

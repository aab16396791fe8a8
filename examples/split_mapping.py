"""Run one configuration fused on one device and split over two, and compare.

Shows the ``mapping`` argument of `drlhet.run`: each group of the training loop (actors, replay,
learner) gets a ``backend@device``. Here the actors run on ``cpu:0`` and the replay (the
``native`` C++ tree) and the learner on ``cpu:1``. At ``delay=0`` (exact PER) a split mapping
runs the strict host loop, which computes exactly what the fused ``lax.scan`` computes, so the
two runs end with the same returns; with ``--delay 4`` the split runs as a pipeline instead
(priority updates applied 4 learner steps late: other numbers, not compared).

Two CPU devices need JAX told so before it starts: ``jax.config.update("jax_num_cpu_devices",
2)`` comes first, before anything creates an array.

Run it with::

    python examples/split_mapping.py             # 2 seeds, 8k env steps each way
    python examples/split_mapping.py --quick     # a few seconds
    python examples/split_mapping.py --delay 4   # the pipelined split, throughput only

The env steps/s it prints are measured on this machine, over the chunks after the first (the
first includes compilation); on a 2-core machine a split mostly shows the mechanism, not a
speed-up (docs/design.md, section 6).
"""

from __future__ import annotations

import argparse

import jax

jax.config.update("jax_num_cpu_devices", 2)  # before JAX creates its devices

import numpy as np  # noqa: E402

import drlhet  # noqa: E402


def replay_backend() -> str:
    """``native`` where its C++ library loads, else the pure-JAX tree (with a note)."""
    try:
        drlhet.tree_ops("native")
        return "native"
    except drlhet.BackendUnavailable as e:
        print(f"note: the native replay backend cannot load here ({e}); using 'jax'")
        return "jax"


def steps_per_s(rows: list[dict]) -> float:
    """Env steps per second (all seeds) over the chunks after the first, as measured."""
    later = rows[1:] or rows
    return float(np.median([r["env_steps_per_s"] for r in later]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8_000, help="env steps per seed")
    parser.add_argument("--eval-every", type=int, default=1_500)
    parser.add_argument("--delay", type=int, default=0, help="priority-update delay k")
    parser.add_argument("--quick", action="store_true", help="a short run")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.eval_every = 2_000, 500

    backend = replay_backend()
    cfg = drlhet.TrainConfig(
        env="CartPole-v1",
        seeds=args.seeds,
        steps=args.steps,
        eval_every=args.eval_every,
        warmup=1_000,
        delay=args.delay,
    )
    mappings = {
        "fused": f"actors=cpu:0,replay={backend}@cpu:0,learner=cpu:0",
        "split": f"actors=cpu:0,replay={backend}@cpu:1,learner=cpu:1",
    }
    print(f"devices: {jax.devices()}")
    results, agents = {}, {}
    for name, mapping in mappings.items():
        states, rows = drlhet.run(cfg, mapping=mapping)
        results[name], agents[name] = rows, states.agent
        print(
            f"{name:5s} {mapping}: {len(rows)} chunks, final eval returns per seed "
            f"{[round(r, 1) for r in rows[-1]['eval_return']]}, "
            f"{steps_per_s(rows):,.0f} env steps/s (measured, this machine, all seeds)"
        )
    # The agents are compared bit for bit; the rows' returns too. (A row's loss and training
    # return are means over the chunk, which the two paths reduce in another precision and
    # order: they agree to float32 rounding only.)
    same_returns = [r["eval_return"] for r in results["fused"]] == [
        r["eval_return"] for r in results["split"]
    ]
    same_agents = all(
        np.array_equal(a, b)
        for a, b in zip(
            jax.tree.leaves(jax.device_get(agents["fused"])),
            jax.tree.leaves(jax.device_get(agents["split"])),
            strict=True,
        )
    )
    if args.delay == 0:
        print(f"fused and split give the same eval returns at delay 0: {same_returns}")
        print(f"fused and split end with bit-identical agents at delay 0: {same_agents}")
    else:
        print(f"delay {args.delay}: the split runs as a pipeline; its numbers are not compared")


if __name__ == "__main__":
    main()

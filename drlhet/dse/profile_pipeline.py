"""The host's cost per stage call of the host-driven pipeline, measured from a short real run.

Split mappings of CPU devices run with in-program channels (no host work per call); the
host-driven loops remain the path of any mapping with an accelerator, whose CPU stages pay these
costs. The profile runs them on the two XLA CPU devices (`drlhet.runtime.pipeline.host_driven`).

docs/design.md sections 5 and 6. The pipeline's threads time themselves (`drlhet.runtime.threads
.Clock`); this runs the pipeline for a few chunks on a split mapping of the two XLA CPU devices in
which every payload but the parameters crosses devices (actors and learner on one device, the
replay on the other) and keeps, per chunk after the first, each stage's dispatch time per call
(the actors and the learner share a thread, each dispatch timed apart) and the time per
`device_put` of a packed payload. `drlhet.dse.pipelined` charges them to the
threads, the host and the cores.
"""

from __future__ import annotations

import statistics
from typing import Any

from drlhet.dse.key import ProfileKey

__all__ = ["profile_pipeline", "PIPELINE_FIGURES"]

PIPELINE_FIGURES = ("dispatch_actors", "dispatch_replay", "dispatch_learner", "put")
"""Figures of a profile's ``pipeline`` group: seconds per stage call (dispatch) of each group and
seconds per packed payload put across devices."""
_PUTS = {"actors": 1, "replay": 1, "learner": 1}
"""Puts per call of each group in the profiled mapping: transitions, batches, priority updates
(the parameters stay on the learner's device, the actors')."""


def profile_pipeline(
    key: ProfileKey, devices: tuple[Any, Any], chunks: int = 3, chunk_steps: int = 2_000
) -> dict[str, dict[str, float]]:
    """Runs ``key`` (its backend; ``delay = 2 sgd_steps``, one iteration per call) pipelined
    for ``chunks`` chunks with actors and learner on ``devices[0]`` and the replay on
    ``devices[1]``.

    Returns:
      ``{figure: {"median", "min", "max"}}`` in seconds over the chunks after the first, for
      each of `PIPELINE_FIGURES`.
    """
    from drlhet.runtime.pipeline import host_driven
    from drlhet.runtime.run import run

    d0, d1 = (f"{d.platform}:{d.id}" for d in devices)
    every = key.num_envs * max(1, chunk_steps // key.num_envs)
    warmup = max(1_000, key.batch)
    cfg = key.train_config(
        delay=2 * key.sgd_steps,
        eval_every=every,
        eval_envs=1,
        warmup=warmup,
        steps=warmup + chunks * every,
    )
    replay = f"{key.backend}@{d1}" if key.backend else d1  # a bare device: its fastest
    mapping = f"actors={d0},replay={replay},learner={d0}"
    with host_driven():  # the loops an accelerator's mapping runs (CPUs use channels)
        _, rows = run(cfg, mapping)
    samples: dict[str, list[float]] = {f: [] for f in PIPELINE_FIGURES}
    for row in rows[1:]:
        put_s, puts = 0.0, 0
        for clock in row["threads"].values():  # actors+learner, replay
            for group in _PUTS:
                if f"dispatch_{group}_ms" in clock:
                    samples[f"dispatch_{group}"].append(clock[f"dispatch_{group}_ms"] / 1e3)
                    puts += _PUTS[group] * clock["calls"]
            put_s += clock["transfer_ms"] / 1e3 * clock["calls"]
        samples["put"].append(put_s / max(puts, 1))
    return {
        f: {"median": statistics.median(v), "min": min(v), "max": max(v)}
        for f, v in samples.items()
    }

"""The relaxed model of the threaded pipeline (docs/design.md sections 5 and 6).

Used by `drlhet.dse.model.Model` for ``delay >= sgd_steps`` on a mapping split over devices
(`drlhet.runtime.pipeline`). Pure: no JAX.
"""

from __future__ import annotations

from typing import Any

from drlhet.backends.base import CPU, GROUPS, Placement

__all__ = ["PER_STEP_HOPS", "pipelined_busy"]

PER_STEP_HOPS = ("hop_batch", "hop_priorities")
"""Hops the model's terms count once per learner step (the others once per iteration)."""


def pipelined_busy(
    model: Any, places: dict[str, Placement], delay: int, hops: dict[str, float]
) -> dict[str, float]:
    """Busy seconds per iteration of the threaded pipeline's resources
    (`drlhet.runtime.pipeline`): U = max(1, delay // (2 S)) iterations per stage call, one
    host thread per group, one hop of each payload per call.

    * each group's *thread*: its stage's host overhead per call (dispatch: the profiled call
      time less the compute) and its outgoing hops (XLA runs the stage itself asynchronously,
      measured: a learner call returns in 0.1-0.2 ms of its 0.5 ms);
    * each *device*: the compute of the groups on it;
    * the *host* (Python's lock): every thread's host work, which runs one at a time;
    * the *CPU cores*: the compute of every CPU device plus the host work, over the cores;
    * the *dependency cycle*: replay call c waits for learner call ``c - ceil(k / P)``, so
      one replay call, one learner call and their hops take at most that many calls.
    """
    n_sgd = model.s.sgd_steps
    u = max(1, delay // (2 * n_sgd))
    lead = -(-delay // (u * n_sgd))
    ca, cr, cl = (model.compute(g, places[g]) for g in GROUPS)
    work = {
        "actors": ca["actors"],
        "replay": cr["insert"] + n_sgd * (cr["sample"] + cr["update"]),
        "learner": n_sgd * cl["train"],
    }
    first = {
        "actors": ("actors", "actors"),
        "replay": ("replay_in", "insert"),
        "learner": ("learner", "train"),
    }
    over = {}
    for g, (stage, prim) in first.items():
        c = {**ca, **cr, **cl}
        over[g] = (
            max(
                0.0,
                model.call(stage, places[g]) - c[prim] - (c["sample"] if g == "replay" else 0.0),
            )
            / u
        )
    per_hop = {h: v / (n_sgd if h in PER_STEP_HOPS else 1) / u for h, v in hops.items()}
    out_hops = {
        "actors": ("hop_transitions",),
        "replay": ("hop_batch",),
        "learner": ("hop_priorities", "hop_params"),
    }
    on_cpu = {g: model.kind(places[g].device) == CPU for g in GROUPS}
    busy: dict[str, float] = {}
    host = 0.0
    for g in GROUPS:
        moves = sum(per_hop[h] for h in out_hops[g])
        busy[f"thread {g}"] = over[g] + moves
        host += over[g] + moves
        dev = places[g].device
        busy[dev] = busy.get(dev, 0.0) + work[g]
    cpu_work = sum(work[g] for g in GROUPS if on_cpu[g])
    busy["host"] = host
    busy[f"{CPU} cores"] = (cpu_work + host) / model.cpu_cores
    latency = {g: work[g] + busy[f"thread {g}"] for g in ("replay", "learner")}
    busy["dependency cycle"] = (latency["replay"] + latency["learner"]) / lead
    return busy

"""The relaxed model of the threaded pipeline (docs/design.md sections 5 and 6).

Used by `drlhet.dse.model.Model` for ``delay >= sgd_steps`` on a mapping split over devices
(`drlhet.runtime.pipeline`). Pure: no JAX.
"""

from __future__ import annotations

from typing import Any

from drlhet.backends.base import CPU, GROUPS, Placement

__all__ = ["PER_STEP_HOPS", "pipelined_busy", "in_program", "unroll", "CHANNEL_MESSAGE_S"]

PER_STEP_HOPS = ("hop_batch", "hop_priorities")
"""Hops the model's terms count once per learner step (the others once per iteration)."""


def unroll(delay: int, sgd_steps: int, iterations: int | None) -> int:
    """U, the iterations per stage call of the pipeline, by the runtime's rule
    (`drlhet.runtime.stages.unroll_of`, which tests/dse/test_pipelined.py holds this to):
    ``max(1, delay // (2 sgd_steps))`` lowered until it divides ``iterations``, the iterations
    of a chunk (None: not known, not lowered). Lowered from at most ``iterations`` (which
    divides itself): counting down from a huge delay's U took as many steps as the delay."""
    u = max(1, delay // (2 * sgd_steps))
    if iterations:
        u = min(u, iterations)
        while iterations % u:
            u -= 1
    return u


def pipelined_busy(
    model: Any, places: dict[str, Placement], delay: int, hops: dict[str, float]
) -> dict[str, float]:
    """Busy seconds per iteration of the threaded pipeline's resources
    (`drlhet.runtime.pipeline`): U iterations per stage call (`unroll`: the run's chunk of
    ``model.s.iterations`` iterations), one host thread per group, one hop of each payload per
    call.

    * each device's *thread* (the stages of the groups on it): their host overhead per call
      (dispatch: the profiled call time less the compute; two stages in one program charged
      as two dispatches, an upper bound: measured 0.18-0.20 ms for actors + replay against
      0.13 + 0.14 ms apart) and their outgoing hops (XLA runs the stage itself asynchronously,
      measured: a learner call returns in 0.1-0.2 ms of its 0.5 ms);
    * each *device*: the compute of the groups on it;
    * the *host* (Python's lock): every thread's host work, which runs one at a time;
    * the *CPU cores*: the compute of every CPU device over the cores, plus the host work (the
      host's work does not overlap the compute on the development machine: measured);
    * the *dependency cycles*: replay call c waits for learner call ``c - floor(k / P)``, so
      one replay call, one learner call and their hops take at most that many calls; actors
      call c waits for learner call ``c - 2``: one call of each group takes at most two calls.
    """
    n_sgd = model.s.sgd_steps
    u = unroll(delay, n_sgd, model.s.iterations)
    lead = max(1, delay // (u * n_sgd))  # its last update is of learner call c - lead
    ca, cr, cl = (model.compute(g, places[g]) for g in GROUPS)
    work = {
        "actors": ca["actors"],
        "replay": cr["insert"] + n_sgd * (cr["sample"] + cr["update"]),
        "learner": n_sgd * cl["train"],
    }
    if in_program(model, places):
        return _in_program_busy(model, places, work, u * n_sgd, lead)
    over = {g: _dispatch(model, g, places[g]) / u for g in GROUPS}
    per_hop = {h: v / (n_sgd if h in PER_STEP_HOPS else 1) / u for h, v in hops.items()}
    # over an accelerator's link a call's payload packs all of its U iterations (U S batches
    # and priority entries, U iterations' transitions): one latency, U times the bytes
    items = {"hop_transitions": u, "hop_batch": u * n_sgd, "hop_priorities": u * n_sgd}
    for h, v in hops.items():
        src, dst = (places[g].device for g in _HOP_ENDS[h])
        if v and (model.kind(src) != CPU or model.kind(dst) != CPU):
            per_hop[h] = model.hop(h.removeprefix("hop_"), src, dst, items.get(h, 1)) / u
    if _profiled(model):  # a packed payload between CPU devices costs one put
        put = model.figure("pipeline", "put", None)
        per_hop = {
            h: put / u if v and _cpu_hop(model, places, h) else v for h, v in per_hop.items()
        }
    out_hops = {
        "actors": ("hop_transitions",),
        "replay": ("hop_batch",),
        "learner": ("hop_priorities", "hop_params"),
    }
    on_cpu = {g: model.kind(places[g].device) == CPU for g in GROUPS}
    busy: dict[str, float] = {}
    host = 0.0
    for g in GROUPS:  # one thread per device: the stages on it share their thread
        dev = places[g].device
        moves = sum(per_hop[h] for h in out_hops[g])
        thread = f"thread {'+'.join(x for x in GROUPS if places[x].device == dev)}"
        busy[thread] = busy.get(thread, 0.0) + over[g] + moves
        host += over[g] + moves
        busy[dev] = busy.get(dev, 0.0) + work[g]
    cpu_work = sum(work[g] for g in GROUPS if on_cpu[g])
    busy["host"] = host
    # measured (2-core VM, k = 4, 6 split mappings): the host's work does not overlap the CPU
    # compute; host + compute / cores came within -15%..+9% where (host + compute) / cores
    # over-predicted by 16-63% (docs/results.md)
    busy[f"{CPU} cores"] = cpu_work / model.cpu_cores + host
    latency = {g: work[g] + over[g] + sum(per_hop[h] for h in out_hops[g]) for g in GROUPS}
    # replay call c waits for learner call c - lead, actors call c for learner call c - 2
    busy["dependency cycle"] = max(
        (latency["replay"] + latency["learner"]) / lead, sum(latency.values()) / 2
    )
    return busy


CHANNEL_MESSAGE_S = 5e-6
"""Seconds per message of an in-program channel (a send, its copy and the wake-up of the
receiver): measured, a ping-pong of 16 KiB messages between two programs on the 2-core
development VM took 7.7 us per round of two messages (2026-11-24)."""
_MESSAGES = {"actors": 2, "replay": 2, "learner": 2}
"""Messages per stage call besides the P priority updates (one per learner step) that the
replay receives and the learner sends."""


def in_program(model: Any, places: dict[str, Placement]) -> bool:
    """Whether the pipeline runs this mapping with in-program channels
    (`drlhet.runtime.channel_stages`): every group on a CPU device (unless the model is told
    the host-driven loops run, ``model.host_driven``)."""
    if getattr(model, "host_driven", False):
        return False
    return all(model.kind(places[g].device) == CPU for g in GROUPS)


def _in_program_busy(
    model: Any, places: dict[str, Placement], work: dict[str, float], p: int, lead: int
) -> dict[str, float]:
    """Busy seconds per iteration with in-program channels: no Python per stage call; each
    device's program runs its groups' stages one after the other, plus their channel messages;
    the CPU cores run every program; the dependency cycles as for the host-driven loops."""
    u = p // model.s.sgd_steps
    over = {g: (_MESSAGES[g] + (p if g != "actors" else 0)) * CHANNEL_MESSAGE_S / u for g in GROUPS}
    busy: dict[str, float] = {}
    for g in GROUPS:
        dev = places[g].device
        thread = f"thread {'+'.join(x for x in GROUPS if places[x].device == dev)}"
        busy[thread] = busy.get(thread, 0.0) + work[g] + over[g]
        busy[dev] = busy.get(dev, 0.0) + work[g]
    busy[f"{CPU} cores"] = sum(work[g] + over[g] for g in GROUPS) / model.cpu_cores
    latency = {g: work[g] + over[g] for g in GROUPS}
    busy["dependency cycle"] = max(
        (latency["replay"] + latency["learner"]) / lead, sum(latency.values()) / 2
    )
    return busy


_HOP_ENDS = {
    "hop_transitions": ("actors", "replay"),
    "hop_batch": ("replay", "learner"),
    "hop_priorities": ("learner", "replay"),
    "hop_params": ("learner", "actors"),
}
_FIRST_STAGE = {
    "actors": ("actors", ("actors",)),
    "replay": ("replay_in", ("insert", "sample")),
    "learner": ("learner", ("train",)),
}
"""Each group's first stage of the strict loop and the primitives it runs (the fallback)."""


def _profiled(model: Any) -> bool:
    """Whether the CPU profiles hold the pipeline's own host figures (`profile_pipeline`)."""
    return bool(model.profiles) and all(p.get("pipeline") for p in model.profiles.values())


def _cpu_hop(model: Any, places: dict[str, Placement], hop: str) -> bool:
    return all(model.kind(places[g].device) == CPU for g in _HOP_ENDS[hop])


def _dispatch(model: Any, group: str, place: Placement) -> float:
    """Host seconds per pipeline stage call of ``group``: measured in the pipeline itself where
    the profile has it, else the strict loop's first stage of the group (profiled call time
    less its compute); an accelerator's dispatch from its sheet."""
    if model.kind(place.device) != CPU:
        return float(model.host_overhead(place.device))
    if _profiled(model):
        backend = place.backend if group == "replay" else None
        return float(model.figure("pipeline", f"dispatch_{group}", backend))
    stage, prims = _FIRST_STAGE[group]
    c = model.compute(group, place)
    return max(0.0, model.call(stage, place) - sum(c[p] for p in prims))

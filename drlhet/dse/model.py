"""The performance model: per-primitive costs on each device, composed into an iteration time.

docs/design.md section 5; Zhang, Meng, Prasanna, TPDS 2023, Sec. 6 (performance model and DSE).
One *iteration* steps ``E`` environments (actors), inserts ``E`` transitions, and runs ``S``
learner steps (sample -> train -> update), so trained samples/s = ``S * B / t_iter`` and env
steps/s = ``E / t_iter``.

Costs come from the CPU *profile* measured here (`drlhet.dse.profile`; a prediction built only
from profiles is labelled ``profiled``), a host backend's measured per-call costs
(`drlhet.dse.baselines`), or a device's sheet and the cost model of its kind
(`drlhet.dse.devices`: GPUs, FPGAs, links; such a prediction is labelled ``modeled``). Which
backend may run which group on which kind of device is read from the backend registry.

Iteration time of a mapping (groups: actors A, replay R, learner L):

* one segment (all on one device): the fused scan, ``actors + insert + S (sample + train +
  update)`` compute times, no dispatch;
* strict (``delay = 0``), several segments: the dependency chain of the host loop, each stage
  waiting for its input (blocking latency of a call: dispatch + run + completion),
  ``call(A) + hop(transitions) + call(insert+sample) + S call(L) + (S-1) call(update+sample) +
  call(update) + S hop(batch) + S hop(priorities) + hop(params)``;
* relaxed (``delay >= 1``) on CPU devices only, below ``S``: the same chain. The per-iteration
  host loop's one thread dispatches every stage and puts every payload, and on the CPU its work
  and the devices' compute share the cores without overlapping (measured: the k = 1 validation
  came within a median 7% of the chain, where the resource model below over-predicted by
  22-88%, docs/results.md);
* relaxed (``delay >= 1``) otherwise: the slowest resource. From ``delay >= S`` the threaded
  pipeline (one host thread per group, U iterations per call): each group's thread, each device's
  compute, the host work all threads share (Python's lock), the CPU cores (compute and host
  work), and the dependency cycle between replay and learner; below it the per-iteration host
  loop, one host thread that runs every CPU stage and hop itself.

This module is pure: it imports no JAX and nothing of the training stack.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

from drlhet.backends.base import CPU, GROUPS, BackendUnavailable, Placement, get, providing
from drlhet.dse.devices import MODELS, DeviceModel, link_seconds
from drlhet.dse.gpu_profile import GpuProfiles
from drlhet.dse.pipelined import pipelined_busy
from drlhet.dse.prediction import Prediction
from drlhet.dse.shapes import Shapes

__all__ = ["Shapes", "Place", "Prediction", "Model"]

_PRIMITIVES = {
    "actors": ("actors",),
    "replay": ("insert", "sample", "update"),
    "learner": ("train",),
}
"""Primitives of each group as the profile names them (act + env_step are one, ``actors``)."""
_STAGES = {
    "actors": ("actors", ("actors",)),
    "replay_in": ("replay", ("insert", "sample")),
    "replay_next": ("replay", ("update", "sample")),
    "apply": ("replay", ("update",)),
    "learner": ("learner", ("train",)),
}
"""Host-loop stage -> (its group, the primitives one call runs)."""
_REPLAY_STAGES = tuple(st for st, (g, _) in _STAGES.items() if g == "replay")


Place = Placement
"""One group's placement: ``backend`` on ``device`` (``cpu:0``, ``h100``, ``u250``)."""


class Model:
    """Costs of each primitive on each device, and the iteration time of a mapping.

    Args:
      shapes: the run's sizes (`drlhet.dse.trace.shapes_of`).
      sheets: device sheets by name (`drlhet.dse.devices.load_sheets`).
      profiles: replay backend -> profile (`drlhet.dse.profile.profile_config`) measured on
        this machine's CPU; every CPU device of the machine is taken to cost the same.
      cpu_cores: the CPUs the CPU devices share (the relaxed model's CPU resource): the
        logical CPUs the process may run on (`drlhet.dse.build.usable_cpus`).
      host_costs: host backend -> its measured seconds per call of each replay stage,
        ``{"replay_in": s, "replay_next": s, "apply": s}`` (the paper-style Python-level
        buffer, `drlhet.dse.baselines`); a host backend without costs cannot be placed.
      host_driven: model the pipeline's host-driven loops on CPU-only splits too (as
        `drlhet.runtime.pipeline.host_driven` runs them); else those run, and are modeled, with
        in-program channels.
      gpu: primitives measured on real GPUs (`drlhet.dse.gpu_profile.GpuProfiles`, this run's
        shape): a group on a GPU sheet they were measured on costs what was measured (the
        replay: with its own backend's profile), not the sheet's model; the prediction's basis
        then names ``<sheet> measured``.
    """

    def __init__(
        self,
        shapes: Shapes,
        sheets: dict[str, dict],
        profiles: dict[str, dict],
        cpu_cores: int = 1,
        host_costs: Mapping[str, dict[str, float]] | None = None,
        host_driven: bool = False,
        gpu: GpuProfiles | None = None,
    ):
        self.s = shapes
        self.sheets = sheets
        self.profiles = profiles
        self.cpu_cores = max(1, cpu_cores)
        self.host_costs = dict(host_costs or {})
        self.host_driven = host_driven
        self.gpu = gpu

    # --- per-device costs -----------------------------------------------------------------
    def kind(self, device: str) -> str:
        """The kind of ``device``: `CPU` for this machine's ``cpu:N``, else its sheet's."""
        if device.partition(":")[0] == CPU:
            return CPU
        if device not in self.sheets:
            raise ValueError(
                f"device {device!r} has no sheet and is not a CPU device; "
                f"known: {CPU}:N, {', '.join(sorted(self.sheets))}"
            )
        return self.sheets[device]["kind"]

    def _device_model(self, device: str) -> DeviceModel:
        kind = self.kind(device)
        if kind not in MODELS:
            raise ValueError(f"device {device!r} is a {kind}: no cost model runs on it")
        return MODELS[kind]

    def compute(self, group: str, place: Place) -> dict[str, float]:
        """Seconds per call of the group's primitives when fused (no dispatch)."""
        prims = _PRIMITIVES[group]
        if self.kind(place.device) == CPU:
            backend = place.backend if group == "replay" else None
            return {p: self.figure("compute", p, backend) for p in prims}
        if self.measured_on_gpu(group, place):
            assert self.gpu is not None
            backend = place.backend if group == "replay" else None
            return {p: self.gpu.seconds(place.device, p, backend) for p in prims}
        model, sheet = self._device_model(place.device), self.sheets[place.device]
        return {p: model.seconds(p, sheet, self.s, self.sheets[sheet["link"]]) for p in prims}

    def measured_on_gpu(self, group: str, place: Place) -> bool:
        """Whether ``group``'s costs on ``place`` come from a GPU profile (the replay: one of
        ``place.backend``)."""
        if self.gpu is None or self.kind(place.device) == CPU:
            return False
        return self.gpu.has(place.device, place.backend if group == "replay" else None)

    def figure(self, group: str, name: str, backend: str | None) -> float:
        """A measured CPU figure (median seconds): ``profiles[backend][group][name]``; with
        ``backend`` None (actors, learner, transfers: they do not depend on the replay
        backend) the median over every backend's profile, which were measured apart."""
        if not self.profiles:
            raise ValueError("no CPU profile: run `drlhet profile` for this configuration")
        if backend is not None and backend not in self.profiles:
            raise ValueError(f"no CPU profile for replay backend {backend!r}")
        profs = [self.profiles[backend]] if backend is not None else self.profiles.values()
        values = [p[group][name]["median"] for p in profs if name in p.get(group, {})]
        if not values:
            raise ValueError(f"the CPU profile has no {group} figure for {name!r}")
        return statistics.median(values)

    def call(self, stage: str, place: Place, waits: bool = False) -> float:
        """Seconds per host-loop call of ``stage`` on ``place`` (dispatch included).

        On a CPU device, from the profile (the replay stages from the replay backend's own):
        with ``waits`` the blocking latency of one call (dispatch, run, completion: a stage of
        the strict chain waits for its input), else the time per call when calls stream back
        to back (dispatch overlaps the previous call's run). A host backend's stages cost what
        was measured of it, waited for or not."""
        kind = self.kind(place.device)
        if get(place.backend).host:
            if place.backend not in self.host_costs:
                raise ValueError(
                    f"no profile of the host-level replay {place.backend!r} (library missing?)"
                )
            return self.host_costs[place.backend][stage]
        if kind == CPU:
            own = place.backend if stage in _REPLAY_STAGES else None
            return self.figure("latency" if waits else "call", stage, own)
        group, prims = _STAGES[stage]
        c = self.compute(group, place)
        return self.host_overhead(place.device) + sum(c[p] for p in prims)

    def host_overhead(self, device: str) -> float:
        """Seconds of the host thread per call of a stage on an accelerator (its dispatch or
        invocation; the run itself is asynchronous)."""
        return self._device_model(device).host_overhead(self.sheets[device])

    def hop(self, payload: str, src: str, dst: str, items: int = 1) -> float:
        """Seconds to move ``payload`` from ``src`` to ``dst`` (0 on one device); over an
        accelerator's link, ``items`` of them packed in one transfer (a pipelined call's)."""
        if src == dst:
            return 0.0
        if self.kind(src) == CPU and self.kind(dst) == CPU:
            if not any(payload in p.get("transfer", {}) for p in self.profiles.values()):
                raise ValueError("the CPU profile has no transfer figures (profiled on 1 device)")
            return self.figure("transfer", payload, None)
        # through the host: one link per accelerator end
        links = [self.sheets[self.sheets[d]["link"]] for d in (src, dst) if self.kind(d) != CPU]
        return sum(link_seconds(link, items * self.s.bytes[payload]) for link in links)

    # --- the relaxed model ----------------------------------------------------------------
    def _relaxed(
        self,
        places: dict[str, Place],
        delay: int,
        calls: dict[str, float],
        hops: dict[str, float],
    ) -> tuple[float, str, dict[str, float]]:
        """Slowest resource per iteration with ``delay >= 1`` (docs/design.md section 6): the
        per-iteration host loop below ``S`` learner steps; from ``S`` up the threaded pipeline
        (`drlhet.dse.pipelined`). A host replay is never pipelined. Returns ``(seconds,
        bottleneck, busy seconds of every resource)``."""
        n_sgd = self.s.sgd_steps
        if delay >= n_sgd and not get(places["replay"].backend).host:
            busy = pipelined_busy(self, places, delay, hops)
        else:
            stage = {
                "actors": calls["actors"],
                "replay": calls["replay_in"] + calls["replay_next"] + calls["apply"],
                "learner": calls["learner"],
            }
            n_calls = {"actors": 1.0, "replay": n_sgd + 1.0, "learner": float(n_sgd)}
            busy = self._busy(places, stage, dict(hops), n_calls)
        bottleneck = max(busy, key=lambda d: busy[d])
        return busy[bottleneck], bottleneck, busy

    def _busy(
        self,
        places: dict[str, Place],
        stage: dict[str, float],
        per_hop: dict[str, float],
        n_calls: dict[str, float],
    ) -> dict[str, float]:
        """Busy seconds per iteration of each resource of the per-iteration host loop: each
        device (its stages), each link (its hops), the CPU cores all CPU devices share, and the
        *host thread* that drives the loop alone: it pays the whole of every CPU stage and every
        hop between CPU devices, and only the dispatch of a stage on an accelerator."""
        stage_dev = {g: places[g].device for g in GROUPS}
        on_cpu = {d: self.kind(d) == CPU for d in stage_dev.values()}
        busy: dict[str, float] = {}
        for g, dev in stage_dev.items():
            busy[dev] = busy.get(dev, 0.0) + stage[g]
        devices = dict(busy)
        host = sum(
            stage[g] if on_cpu[dev] else n_calls[g] * self.host_overhead(dev)
            for g, dev in stage_dev.items()
        )
        link_of = {
            "hop_transitions": (stage_dev["actors"], stage_dev["replay"]),
            "hop_batch": (stage_dev["replay"], stage_dev["learner"]),
            "hop_priorities": (stage_dev["learner"], stage_dev["replay"]),
            "hop_params": (stage_dev["learner"], stage_dev["actors"]),
        }
        for h, ends in link_of.items():
            if per_hop[h]:
                name = "link " + "-".join(sorted(ends))
                busy[name] = busy.get(name, 0.0) + per_hop[h]
                if all(on_cpu[e] for e in ends):
                    host += per_hop[h]
        busy[f"{CPU} cores"] = sum(v for d, v in devices.items() if on_cpu[d]) / self.cpu_cores
        busy["host thread"] = host
        return busy

    # --- feasibility ----------------------------------------------------------------------
    def costed(self, group: str, place: Place) -> bool:
        """Whether the model has the costs of ``group`` on ``place``: a host backend's
        measured costs, or on a CPU device the replay backend's profile (the actors and the
        learner cost the same whatever replay backend was profiled; sheets cost the rest)."""
        if get(place.backend).host:
            return place.backend in self.host_costs
        if group == "replay" and self.kind(place.device) == CPU:
            return place.backend in self.profiles
        return True

    def infeasible(self, places: dict[str, Place]) -> str:
        """Why a mapping cannot exist (empty when it can): a backend that the registry does
        not offer for its group on its kind of device, or a device that cannot hold its group
        (its cost model says why)."""
        for g in GROUPS:
            why = self._unsupported(g, places[g])
            if why:
                return why
        for g in GROUPS:
            dev = places[g].device
            if self.kind(dev) != CPU:
                why = self._device_model(dev).infeasible(g, self.sheets[dev], self.s)
                if why:
                    return why
        return ""

    def _unsupported(self, group: str, place: Place) -> str:
        """Why the registry offers no ``place.backend`` for ``group`` on ``place.device``."""
        kind = self.kind(place.device)
        try:
            b = get(place.backend)
        except BackendUnavailable as e:
            return str(e)
        if not providing(group, kind):
            return f"no backend runs the {group} on {kind.upper()} devices"
        if kind not in b.platforms:
            return f"backend {b.name!r} runs on {'/'.join(p.upper() for p in b.platforms)} only"
        if group not in b.provides:
            return f"backend {b.name!r} implements the {', '.join(b.provides)} only"
        tree = (self.s.capacity, self.s.branching) if group == "replay" else None
        return b.refuses(tree)  # a replay backend may hold some trees only (`accepts`)

    # --- the iteration model --------------------------------------------------------------
    def predict(self, places: dict[str, Place], delay: int = 0) -> Prediction:
        """Predicted time per iteration of ``places`` at priority-update delay ``delay``."""
        s = self.s
        basis = self.basis(places)
        why = self.infeasible(places)
        if why:
            return Prediction(places, math.inf, 0.0, 0.0, basis, False, "infeasible", {}, why)
        one_device = len({places[g].device for g in GROUPS}) == 1
        if one_device and not get(places["replay"].backend).host:
            terms = self._fused(places)
            t, bottleneck = sum(terms.values()), "fused"
        else:
            strict = delay == 0 or self._serial_host_loop(places, delay)
            terms = self._split(places, strict)
            if strict:
                t, bottleneck = sum(terms.values()), "chain"
            else:
                calls = {k: terms[k] for k in _STAGES}
                hops = {k: v for k, v in terms.items() if k.startswith("hop_")}
                t, bottleneck, busy = self._relaxed(places, delay, calls, hops)
                terms.update({f"busy {d}": v for d, v in busy.items()})
        return Prediction(
            places, t, s.sgd_steps * s.batch / t, s.num_envs / t, basis, False, bottleneck, terms
        )

    def basis(self, places: dict[str, Place]) -> str:
        """``profiled`` when every group runs on this machine's CPU; ``profiled (<sheet>
        measured)`` when every group runs on one GPU whose primitives were measured (a GPU
        profile); else ``modeled (...)`` naming what the costs rest on (``sheet``, ``cycle
        model``, ``<sheet> measured``; a split with a measured GPU also rests on the sheets'
        links and dispatch)."""
        sources = {
            f"{p.device} measured"
            if self.measured_on_gpu(g, p)
            else self._device_model(p.device).source(g)
            for g, p in places.items()
            if self.kind(p.device) != CPU
        }
        if not sources:
            return "profiled"
        measured = {x for x in sources if x.endswith(" measured")}
        if measured == sources and len({p.device for p in places.values()}) == 1:
            return f"profiled ({', '.join(sorted(sources))})"
        if measured:
            sources.add("sheet")
        return f"modeled ({', '.join(sorted(sources))})"

    def _fused(self, places: dict[str, Place]) -> dict[str, float]:
        """The terms of one fused scan: compute times, no dispatch, no hop."""
        s, comp = self.s, {}
        for g in GROUPS:
            comp.update(self.compute(g, places[g]))
        return {
            "actors": comp["actors"],
            "insert": comp["insert"],
            "sample": s.sgd_steps * comp["sample"],
            "train": s.sgd_steps * comp["train"],
            "update": s.sgd_steps * comp["update"],
        }

    def _serial_host_loop(self, places: dict[str, Place], delay: int) -> bool:
        """Whether a relaxed mapping runs as the strict chain: the per-iteration host loop
        (``delay < S``) over CPU devices only, with a compiled replay backend (see the module
        docstring: its one thread's work does not overlap the compute)."""
        on_cpu = all(self.kind(places[g].device) == CPU for g in GROUPS)
        return delay < self.s.sgd_steps and on_cpu and not get(places["replay"].backend).host

    def _split(self, places: dict[str, Place], waits: bool) -> dict[str, float]:
        """The terms of the host loop: its stage calls per iteration (blocking latencies when
        ``waits``: the strict chain), then its hops (none between a host replay, which fetches
        and puts itself, and a CPU device)."""
        s = self.s
        a, r, ln = places["actors"], places["replay"], places["learner"]
        calls = {
            "actors": self.call("actors", a, waits),
            "replay_in": self.call("replay_in", r, waits),
            "learner": s.sgd_steps * self.call("learner", ln, waits),
            "replay_next": (s.sgd_steps - 1) * self.call("replay_next", r, waits),
            "apply": self.call("apply", r, waits),
        }
        # a host replay's measured costs fetch from and put to a CPU device (any: one memory)
        host = get(r.backend).host
        at = {d: d if host and self.kind(d) == CPU else r.device for d in (a.device, ln.device)}
        hops = {
            "hop_transitions": self.hop("transitions", a.device, at[a.device]),
            "hop_batch": s.sgd_steps * self.hop("batch", at[ln.device], ln.device),
            "hop_priorities": s.sgd_steps * self.hop("priorities", ln.device, at[ln.device]),
            "hop_params": self.hop("params", ln.device, a.device),
        }
        return {**calls, **hops}

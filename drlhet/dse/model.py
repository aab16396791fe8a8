"""The performance model: per-primitive costs on each device, composed into an iteration time.

DESIGN section 5; Zhang, Meng, Prasanna, TPDS 2023, Sec. 6 (performance model and DSE). One
*iteration* steps ``E`` environments (actors), inserts ``E`` transitions, and runs ``S`` learner
steps (sample -> train -> update), so trained samples/s = ``S * B / t_iter`` and env steps/s =
``E / t_iter``.

Where the costs come from:

* a CPU device of this machine: the *profile* (`drlhet.dse.profile`), measured here; a prediction
  built only from profiles is labelled ``profiled``;
* a GPU from its device sheet: kernel launches x launch latency + bytes / bandwidth + FLOPs /
  FLOP rate;
* an FPGA from its sheet and the HLS design: the sum tree as one pipeline stage per level with the
  batch streamed at II = 1, ``(levels * stage_cycles + n - 1) / clock``, data rows from DDR; the
  learner from its MACs over the DSPs;
* links from latency + bytes / bandwidth.

A prediction with any sheet-based cost is labelled ``modeled``.

Iteration time of a mapping (groups: actors A, replay R, learner L):

* one segment (all on one device): the fused scan, ``actors + insert + S (sample + train +
  update)`` compute times, no dispatch;
* strict (``delay = 0``), several segments: the dependency chain of the host loop, each stage
  waiting for its input (blocking latency of a call: dispatch + run + completion),
  ``call(A) + hop(transitions) + call(insert+sample) + S call(L) + (S-1) call(update+sample) +
  call(update) + S hop(batch) + S hop(priorities) + hop(params)``;
* relaxed (``delay >= 1``): the slowest resource: each device's stage calls (streamed: dispatch
  overlaps the previous call), each link's hops, the CPU cores shared by all CPU devices of
  the machine, and the host thread (which runs every CPU stage and CPU-to-CPU hop itself and
  dispatches the accelerators' stages).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "Shapes",
    "Place",
    "Prediction",
    "load_sheets",
    "shapes_of",
    "Model",
]

GROUPS = ("actors", "replay", "learner")
STAGES = ("actors", "replay_in", "replay_next", "apply", "learner")


def load_sheets(directory: Path | None = None) -> dict[str, dict]:
    """Device sheets by name (``h100``, ``u250``, ``pcie3``, ...): the JSON files of a folder
    (default: the ones shipped in ``drlhet/dse/sheets``). Each value has a ``source``."""
    files = (
        sorted(Path(directory).glob("*.json"))
        if directory
        else sorted(
            (p for p in resources.files("drlhet.dse").joinpath("sheets").iterdir()),
            key=lambda p: p.name,
        )
    )
    sheets = {}
    for f in files:
        if not f.name.endswith(".json"):
            continue
        try:
            sheet = json.loads(f.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"device sheet {f} is not valid JSON: {e}") from e
        for field in ("name", "kind", "values"):
            if field not in sheet:
                raise ValueError(f"device sheet {f} lacks {field!r}")
        for name, v in sheet["values"].items():
            if not isinstance(v, dict) or "value" not in v or not v.get("source"):
                raise ValueError(f"device sheet {f}: {name} needs a value and a source")
        sheets[sheet["name"]] = sheet
    return sheets


@dataclasses.dataclass(frozen=True)
class Shapes:
    """Sizes the analytical models need (from the configuration, no measurement).

    Attributes:
      batch, capacity, branching, num_envs, sgd_steps: the run's shape.
      levels: tree levels below the root.
      tree_bytes: bytes of the sum tree's nodes.
      row_bytes: bytes of one stored transition.
      params: learner parameters (one network).
      macs_per_sample: multiply-accumulates of one forward pass for one sample.
      layers: dense layers of the network.
      bytes: payload bytes per hop (``transitions``, ``batch``, ``priorities``, ``params``).
    """

    batch: int
    capacity: int
    branching: int
    num_envs: int
    sgd_steps: int
    levels: int
    tree_bytes: int
    row_bytes: int
    params: int
    macs_per_sample: int
    layers: int
    bytes: dict[str, int]


def shapes_of(key: Any) -> Shapes:
    """The `Shapes` of a `drlhet.dse.profile.ProfileKey` (traces shapes only; fast)."""
    import jax
    import numpy as np

    from drlhet.replay.sum_tree import layout as tree_layout
    from drlhet.runtime.trainer import make_trainer

    tr = make_trainer(key.train_config())
    lay = tree_layout(key.capacity, key.branching)
    state = jax.eval_shape(tr.init, jax.random.key(0))
    params = state.agent.params
    leaves = jax.tree.leaves(params)
    kernels = [x.shape for x in leaves if len(x.shape) == 2]
    macs = int(sum(a * b for a, b in kernels))

    def nbytes(t):
        return int(sum(np.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(t)))

    row = nbytes(state.replay.storage) // key.capacity
    return Shapes(
        batch=key.batch,
        capacity=key.capacity,
        branching=key.branching,
        num_envs=key.num_envs,
        sgd_steps=key.sgd_steps,
        levels=lay.depth,
        tree_bytes=4 * lay.size,
        row_bytes=row,
        params=int(sum(np.prod(x.shape) for x in leaves)),
        macs_per_sample=macs,
        layers=len(kernels),
        bytes={
            "transitions": key.num_envs * row + 8 * key.sgd_steps,
            "batch": key.batch * (row + 4) + 8,
            "priorities": key.batch * 12,
            "params": nbytes(state.agent),  # the scheduler moves the whole agent state
        },
    )


@dataclasses.dataclass(frozen=True)
class Place:
    """One group's placement: ``backend`` on ``device`` (``cpu:0``, ``h100``, ``u250``)."""

    backend: str
    device: str

    def __str__(self) -> str:
        return f"{self.backend}@{self.device}"


@dataclasses.dataclass(frozen=True)
class Prediction:
    """A mapping's predicted iteration time and throughput.

    Attributes:
      places: group -> `Place`.
      iteration_s: predicted seconds per iteration.
      trained_samples_per_s: ``sgd_steps * batch / iteration_s``.
      env_steps_per_s: ``num_envs / iteration_s``.
      basis: ``profiled`` (costs measured on this machine) or ``modeled`` (device sheets).
      runnable: every device and backend is present here.
      bottleneck: the term that sets the time (a resource, or ``chain``/``fused``).
      terms: the cost terms (seconds) the time was built from.
      note: why a mapping is infeasible, if it is (``iteration_s`` is then ``inf``).
    """

    places: dict[str, Place]
    iteration_s: float
    trained_samples_per_s: float
    env_steps_per_s: float
    basis: str
    runnable: bool
    bottleneck: str
    terms: dict[str, float]
    note: str = ""

    def mapping_text(self) -> str:
        return ",".join(f"{g}={self.places[g]}" for g in GROUPS)


class Model:
    """Costs of each primitive on each device, and the iteration time of a mapping.

    Args:
      shapes: the run's sizes (`shapes_of`).
      sheets: device sheets by name (`load_sheets`).
      profiles: replay backend -> profile (`drlhet.dse.profile.profile_config`) measured on
        this machine's CPU; every CPU device of the machine is taken to cost the same.
      cpu_cores: physical cores the CPU devices share (the relaxed model's CPU resource).
      python_replay: the measured costs of a Python-level buffer (the paper-style baseline),
        ``{"replay_in": s, "replay_next": s, "apply": s}`` per call; optional.
    """

    def __init__(
        self,
        shapes: Shapes,
        sheets: dict[str, dict],
        profiles: dict[str, dict],
        cpu_cores: int = 1,
        python_replay: dict[str, float] | None = None,
    ):
        self.s = shapes
        self.sheets = sheets
        self.profiles = profiles
        self.cpu_cores = max(1, cpu_cores)
        self.python_replay = python_replay

    # --- per-device costs -----------------------------------------------------------------
    def kind(self, device: str) -> str:
        if device.startswith("cpu"):
            return "cpu"
        if device not in self.sheets:
            raise ValueError(
                f"device {device!r} has no sheet and is not a CPU device; "
                f"known: cpu:N, {', '.join(sorted(self.sheets))}"
            )
        return self.sheets[device]["kind"]

    def _v(self, device: str, name: str) -> float:
        return float(self.sheets[device]["values"][name]["value"])

    def compute(self, group: str, place: Place) -> dict[str, float]:
        """Seconds per call of the group's primitives when fused (no dispatch)."""
        kind = self.kind(place.device)
        prims = {
            "actors": ("actors",),
            "replay": ("insert", "sample", "update"),
            "learner": ("train",),
        }
        if kind == "cpu":
            backend = place.backend if group == "replay" else None
            return {p: self._figure("compute", p, backend) for p in prims[group]}
        fn = self._gpu if kind == "gpu" else self._fpga
        return {p: fn(p, place.device) for p in prims[group]}

    def _figure(self, group: str, name: str, backend: str | None) -> float:
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

    def _gpu(self, prim: str, dev: str) -> float:
        """Kernel launches x launch latency + bytes / (bandwidth x efficiency) + FLOPs / rate."""
        s = self.s
        launch = self._v(dev, "launch_us") * 1e-6
        bw = self._v(dev, "mem_bw_gbs") * 1e9
        rand_bw = bw * self._v(dev, "random_access_efficiency")
        flops = self._v(dev, "fp32_tflops") * 1e12 * self._v(dev, "compute_efficiency")
        row = s.branching * 4
        if prim == "sample":  # one kernel per level (descent) + RNG, gather, weights
            kernels = s.levels + 4
            nbytes = s.batch * (s.levels * row + s.row_bytes)
            return kernels * launch + nbytes / rand_bw
        if prim in ("update", "insert"):  # scatter leaves + one kernel per level (parent sums)
            n = s.batch if prim == "update" else s.num_envs
            kernels = 2 * s.levels + 2
            nbytes = 2 * n * s.levels * row + (n * s.row_bytes if prim == "insert" else 0)
            return kernels * launch + nbytes / rand_bw
        if prim == "train":  # fwd + 2x bwd of the online net, 2 fwd on next obs (double DQN)
            kernels = 12 * s.layers + 10
            flop = 2 * 5 * s.batch * s.macs_per_sample
            return kernels * launch + flop / flops + 3 * 4 * s.params / bw
        if prim == "actors":  # policy forward + env physics + n-step bookkeeping
            kernels = 3 * s.layers + 20
            return kernels * launch + 2 * s.num_envs * s.macs_per_sample / flops
        raise ValueError(prim)

    def _fpga(self, prim: str, dev: str) -> float:
        """Pipelined sum tree (one stage per level, II = 1) and a DSP-bound learner."""
        s = self.s
        clock = self._v(dev, "clock_mhz") * 1e6
        stage = self._v(dev, "tree_stage_cycles")
        ddr = self._v(dev, "ddr_bw_gbs") * 1e9
        depth = s.levels * stage
        if prim == "sample":
            return (depth + s.batch - 1) / clock + s.batch * s.row_bytes / ddr
        if prim == "update":
            return (depth + s.batch - 1) / clock
        if prim == "insert":
            return (depth + s.num_envs - 1) / clock + s.num_envs * s.row_bytes / ddr
        if prim == "train":
            macs = 5 * s.batch * s.macs_per_sample
            per_cycle = self._v(dev, "dsp") / self._v(dev, "dsp_per_mac")
            return (
                macs / (per_cycle * self._v(dev, "learner_efficiency") * clock)
                + (s.layers * 2 * 20) / clock
            )
        raise ValueError(f"{prim} does not run on an FPGA in this model")

    def call(self, stage: str, place: Place, waits: bool = False) -> float:
        """Seconds per host-loop call of ``stage`` on ``place`` (dispatch included).

        On a CPU device, from the profile (the replay stages from the replay backend's own):
        with ``waits`` the blocking latency of one call (dispatch, run, completion: a stage of
        the strict chain waits for its input), else the time per call when calls stream back
        to back (dispatch overlaps the previous call's run)."""
        kind = self.kind(place.device)
        if place.backend == "python":
            if self.python_replay is None:
                raise ValueError("no profile of the Python-level replay (cpprb not installed?)")
            return self.python_replay[stage]
        if kind == "cpu":
            own = place.backend if stage in ("replay_in", "replay_next", "apply") else None
            return self._figure("latency" if waits else "call", stage, own)
        group = "actors" if stage == "actors" else "learner" if stage == "learner" else "replay"
        c = self.compute(group, place)
        body = {
            "actors": c.get("actors", 0.0),
            "replay_in": c.get("insert", 0.0) + c.get("sample", 0.0),
            "replay_next": c.get("update", 0.0) + c.get("sample", 0.0),
            "apply": c.get("update", 0.0),
            "learner": c.get("train", 0.0),
        }[stage]
        return self.host_overhead(place.device) + body

    def host_overhead(self, device: str) -> float:
        """Seconds of the host thread per call of a stage on an accelerator (its dispatch or
        invocation; the run itself is asynchronous)."""
        kind = self.kind(device)
        return self._v(device, "dispatch_us" if kind == "gpu" else "invocation_us") * 1e-6

    def hop(self, payload: str, src: str, dst: str) -> float:
        """Seconds to move ``payload`` from ``src`` to ``dst`` (0 on one device)."""
        if src == dst:
            return 0.0
        ks, kd = self.kind(src), self.kind(dst)
        if ks == "cpu" and kd == "cpu":
            if not any(payload in p.get("transfer", {}) for p in self.profiles.values()):
                raise ValueError("the CPU profile has no transfer figures (profiled on 1 device)")
            return self._figure("transfer", payload, None)
        t = 0.0
        for dev in (src, dst):  # through the host: one link per accelerator end
            if self.kind(dev) != "cpu":
                link = self.sheets[self.sheets[dev]["link"]]["values"]
                t += link["latency_us"]["value"] * 1e-6 + self.s.bytes[payload] / (
                    link["bw_gbs"]["value"] * 1e9
                )
        return t

    def _relaxed(self, places, delay, calls, hops):
        """Slowest resource per iteration with ``delay >= 1`` (see `drlhet.schedule`): the
        per-iteration host loop below ``2 S``; from ``2 S`` up the pipelined host loop, whose
        stages run ``U = delay // (2 S)`` iterations per call (one dispatch and one hop of each
        payload per call, shared by ``U`` iterations).

        Resources: each device (its stages), each link (its hops), the CPU cores all CPU
        devices share, and the *host thread* that drives the loop. An XLA CPU device runs a
        host-loop call on the thread that dispatches it (measured here: the Python thread is
        busy 80-90% of a split mapping's wall time), so the host thread pays the whole of
        every CPU stage and every hop between CPU devices, and only the dispatch of a stage on
        an accelerator."""
        s = self.s
        a, r, ln = places["actors"], places["replay"], places["learner"]
        n_sgd = s.sgd_steps
        stage_dev = {"actors": a.device, "replay": r.device, "learner": ln.device}
        if delay >= 2 * n_sgd and r.backend != "python":
            u = delay // (2 * n_sgd)
            ca, cr, cl = (self.compute(g, places[g]) for g in GROUPS)
            over = {
                "actors": self.call("actors", a) - ca["actors"],
                "replay": self.call("replay_in", r) - cr["insert"] - cr["sample"],
                "learner": self.call("learner", ln) - cl["train"],
            }
            work = {
                "actors": ca["actors"],
                "replay": cr["insert"] + n_sgd * (cr["sample"] + cr["update"]),
                "learner": n_sgd * cl["train"],
            }
            stage = {g: max(0.0, over[g]) / u + work[g] for g in work}
            per_hop = {
                h: v / (n_sgd if h in ("hop_batch", "hop_priorities") else 1) / u
                for h, v in hops.items()
            }
        else:
            stage = {
                "actors": calls["actors"],
                "replay": calls["replay_in"] + calls["replay_next"] + calls["apply"],
                "learner": calls["learner"],
            }
            per_hop = dict(hops)
        busy: dict[str, float] = {}
        for g, dev in stage_dev.items():
            busy[dev] = busy.get(dev, 0.0) + stage[g]
        # calls per iteration of each group's stages (pipelined: one per U iterations)
        n_calls = {"actors": 1, "replay": n_sgd + 1, "learner": n_sgd}
        if delay >= 2 * n_sgd and r.backend != "python":
            n_calls = {g: 1 / (delay // (2 * n_sgd)) for g in n_calls}
        host = sum(
            stage[g] if dev.startswith("cpu") else n_calls[g] * self.host_overhead(dev)
            for g, dev in stage_dev.items()
        )
        link_of = {
            "hop_transitions": (a.device, r.device),
            "hop_batch": (r.device, ln.device),
            "hop_priorities": (ln.device, r.device),
            "hop_params": (ln.device, a.device),
        }
        for h, ends in link_of.items():
            if per_hop[h]:
                name = "link " + "-".join(sorted(ends))
                busy[name] = busy.get(name, 0.0) + per_hop[h]
                if all(e.startswith("cpu") for e in ends):
                    host += per_hop[h]
        cpu_total = sum(v for d, v in busy.items() if d.startswith("cpu"))
        busy["cpu cores"] = cpu_total / self.cpu_cores
        busy["host thread"] = host
        bottleneck = max(busy, key=lambda d: busy[d])
        return busy[bottleneck], bottleneck, busy

    # --- feasibility ----------------------------------------------------------------------
    def infeasible(self, places: dict[str, Place]) -> str:
        """Why a mapping cannot exist (empty when it can)."""
        for g in GROUPS:
            kind = self.kind(places[g].device)
            b = places[g].backend
            if kind == "fpga" and g == "actors":
                return "actors (environments) do not run on an FPGA"
            if kind == "fpga" and b != "fpga" or b == "fpga" and kind != "fpga":
                return f"backend {b!r} on {places[g].device!r}"
            if b in ("native", "python") and kind != "cpu":
                return f"backend {b!r} runs on the CPU only"
            if b in ("native", "python") and g != "replay":
                return f"backend {b!r} implements the replay buffer only"
        r = places["replay"]
        if self.kind(r.device) == "fpga":
            sram = self._v(r.device, "sram_mb") * 1e6
            if self.s.tree_bytes > sram:
                return f"the sum tree ({self.s.tree_bytes / 1e6:.1f} MB) exceeds {r.device} SRAM"
        return ""

    # --- the iteration model --------------------------------------------------------------
    def predict(self, places: dict[str, Place], delay: int = 0) -> Prediction:
        """Predicted time per iteration of ``places`` at priority-update delay ``delay``."""
        s = self.s
        basis = (
            "modeled"
            if any(self.kind(p.device) != "cpu" for p in places.values())
            else ("profiled")
        )
        why = self.infeasible(places)
        if why:
            return Prediction(places, math.inf, 0.0, 0.0, basis, False, "infeasible", {}, why)
        devs = {g: places[g].device for g in GROUPS}
        fused = len(set(devs.values())) == 1 and places["replay"].backend != "python"
        terms: dict[str, float] = {}
        if fused:
            comp = {}
            for g in GROUPS:
                comp.update(self.compute(g, places[g]))
            terms = {
                "actors": comp["actors"],
                "insert": comp["insert"],
                "sample": s.sgd_steps * comp["sample"],
                "train": s.sgd_steps * comp["train"],
                "update": s.sgd_steps * comp["update"],
            }
            t, bottleneck = sum(terms.values()), "fused"
        else:
            a, r, ln = places["actors"], places["replay"], places["learner"]

            def call(stage: str, place: Place) -> float:
                return self.call(stage, place, waits=delay == 0)

            calls = {
                "actors": call("actors", a),
                "replay_in": call("replay_in", r),
                "learner": s.sgd_steps * call("learner", ln),
                "replay_next": (s.sgd_steps - 1) * call("replay_next", r),
                "apply": call("apply", r),
            }
            hops = {
                "hop_transitions": self.hop("transitions", a.device, r.device),
                "hop_batch": s.sgd_steps * self.hop("batch", r.device, ln.device),
                "hop_priorities": s.sgd_steps * self.hop("priorities", ln.device, r.device),
                "hop_params": self.hop("params", ln.device, a.device),
            }
            terms = {**calls, **hops}
            if delay == 0:
                t, bottleneck = sum(terms.values()), "chain"
            else:
                t, bottleneck, busy = self._relaxed(places, delay, calls, hops)
                terms.update({f"busy {d}": v for d, v in busy.items()})
        return Prediction(
            places,
            t,
            s.sgd_steps * s.batch / t,
            s.num_envs / t,
            basis,
            False,
            bottleneck,
            terms,
        )

"""Design-space exploration: every mapping of the three groups onto the devices, ranked.

DESIGN section 5; Zhang, Meng, Prasanna, TPDS 2023, Sec. 6.2 (exhaustive search over the
mappings the performance model scores). Groups and where they may go:

* actors (act + env_step): ``jax`` on a CPU device or a GPU;
* replay (insert, sample, update): ``jax`` or ``native`` on a CPU device, ``jax`` on a GPU,
  ``fpga`` on an FPGA board, and ``python`` (a Python-level buffer, cpprb, on the host: the
  paper-style baseline, not run by the scheduler);
* learner (train): ``jax`` on a CPU device or a GPU, ``fpga`` on an FPGA board.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from drlhet.dse.model import GROUPS, Model, Place, Prediction

__all__ = ["enumerate_mappings", "search", "baselines", "expand_devices"]


def expand_devices(text: str, cpu_devices: int = 2) -> list[str]:
    """``"cpu,h100,u250"`` -> ``["cpu:0", "cpu:1", "h100", "u250"]`` (``cpu`` means every CPU
    device of this process, ``cpu:N`` one of them)."""
    out: list[str] = []
    for item in filter(None, (t.strip().lower() for t in text.split(","))):
        names = [f"cpu:{i}" for i in range(cpu_devices)] if item == "cpu" else [item]
        out += [n for n in names if n not in out]
    if not out:
        raise ValueError("no devices given")
    return out


def enumerate_mappings(
    model: Model, devices: Iterable[str], python_replay: bool = True
) -> list[dict[str, Place]]:
    """Every placement of actors, replay and learner on ``devices`` that can exist."""
    devices = list(devices)
    kinds = {d: model.kind(d) for d in devices}
    actors = [Place("jax", d) for d in devices if kinds[d] in ("cpu", "gpu")]
    replay = []
    for d in devices:
        if kinds[d] == "cpu":
            replay += [Place("jax", d), Place("native", d)]
        elif kinds[d] == "gpu":
            replay.append(Place("jax", d))
        else:
            replay.append(Place("fpga", d))
    cpus = [d for d in devices if kinds[d] == "cpu"]
    if python_replay and cpus and model.python_replay is not None:
        replay.append(Place("python", cpus[0]))
    learner = [Place("jax" if kinds[d] != "fpga" else "fpga", d) for d in devices]
    return [
        dict(zip(GROUPS, combo, strict=True))
        for combo in itertools.product(actors, replay, learner)
    ]


def search(
    model: Model,
    devices: Iterable[str],
    delay: int = 0,
    present: Iterable[str] = (),
    backends_here: Iterable[str] = ("jax", "native"),
) -> list[Prediction]:
    """Predictions for every mapping, best first; ``runnable`` marks those whose devices are all
    in ``present`` and whose backends exist here (the scheduler can run them)."""
    present, backends_here = set(present), set(backends_here)
    out = []
    for places in enumerate_mappings(model, devices):
        p = model.predict(places, delay)
        runnable = p.note == "" and all(
            pl.device in present and pl.backend in backends_here for pl in places.values()
        )
        out.append(
            Prediction(**{**p.__dict__, "runnable": runnable})  # frozen: rebuild with the flag
        )
    # ties: fewer distinct devices first (cheaper), then by name for a stable order
    out.sort(
        key=lambda p: (
            -p.trained_samples_per_s,
            len({pl.device for pl in p.places.values()}),
            p.mapping_text(),
        )
    )
    return out


def baselines(preds: list[Prediction], model: Model) -> dict[str, Prediction]:
    """The best mapping of each baseline family present in ``preds``:

    * ``all on CPU``: every group on one CPU device, ``jax`` replay (the reference);
    * ``replay on CPU, learner on GPU``;
    * ``all on GPU``;
    * ``paper-style: Python replay``: a Python-level buffer on the host, learner anywhere.
    """

    def gpu_learner(p: Prediction) -> bool:
        return model.kind(p.places["learner"].device) == "gpu"

    fams = {
        "all on CPU (jax)": lambda p: (
            len({pl.device for pl in p.places.values()}) == 1
            and p.places["replay"].device.startswith("cpu")
            and p.places["replay"].backend == "jax"
        ),
        "replay on CPU, learner on GPU": lambda p: (
            p.places["replay"].device.startswith("cpu")
            and p.places["replay"].backend in ("jax", "native")
            and p.places["actors"].device.startswith("cpu")
            and gpu_learner(p)
        ),
        "all on GPU": lambda p: (
            len({pl.device for pl in p.places.values()}) == 1 and gpu_learner(p)
        ),
        "paper-style: Python replay": lambda p: p.places["replay"].backend == "python",
    }
    out = {}
    for name, pred in fams.items():
        hits = [p for p in preds if p.note == "" and pred(p)]
        if hits:
            out[name] = max(hits, key=lambda p: p.trained_samples_per_s)
    return out

"""Design-space exploration: every mapping of the three groups onto the devices, ranked.

docs/design.md section 5; Zhang, Meng, Prasanna, TPDS 2023, Sec. 6.2 (exhaustive search over the
mappings the performance model scores). Where each group may go is read from the backend
registry (`drlhet.backends.base`): on each device, every backend that provides the group on
that device's kind. A *host* backend (the paper-style Python-level buffer) runs in the host
process: it gets one placement, on the first CPU device. A place is enumerated only when the
model has its costs (a replay backend on a CPU device needs its profile, a host backend its
measured costs). Modeled-only backends are enumerated and ranked but never runnable.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable

from drlhet.backends.base import CPU, GPU, GROUPS, PLATFORMS, get, loads, names, providing
from drlhet.dse.model import Model, Place, Prediction

__all__ = ["expand_devices", "enumerate_mappings", "search", "best_to_run"]


def expand_devices(text: str, cpu_devices: int = 2, sheets: dict | None = None) -> list[str]:
    """``"cpu,h100,u250"`` -> ``["cpu:0", "cpu:1", "h100", "u250"]`` (``cpu`` means every CPU
    device of this process, ``cpu:N`` one of them).

    Args:
      text: the devices, comma separated.
      cpu_devices: the CPU devices of this process.
      sheets: the device sheets (`drlhet.dse.devices.load_sheets`); when given, every other
        item must name a sheet of a device, and every group must have a place on the devices.

    Raises:
      ValueError: a CPU device that is not present, an index that is not a number, a name
        without a device sheet, or devices on which a group has no place.
    """
    out: list[str] = []
    for item in filter(None, (t.strip().lower() for t in text.split(","))):
        if item == CPU:
            devices = [f"{CPU}:{i}" for i in range(cpu_devices)]
        elif item.partition(":")[0] == CPU:
            devices = [_cpu_device(item, cpu_devices)]
        else:
            if sheets is not None:
                _check_sheet(item, sheets)
            devices = [item]
        out += [d for d in devices if d not in out]
    if not out:
        raise ValueError(f"no devices given in {text!r}")
    if sheets is not None:
        kinds = {d: CPU if d.startswith(f"{CPU}:") else sheets[d]["kind"] for d in out}
        for group in GROUPS:
            if not any(providing(group, kind) for kind in kinds.values()):
                can = [p for p in PLATFORMS if providing(group, p)]
                raise ValueError(
                    f"no device of {','.join(out)} runs the {group}: add a device of a kind "
                    f"in {can}"
                )
    return out


def _cpu_device(item: str, cpu_devices: int) -> str:
    """``cpu:N`` as the DSE names it, when this process has it (it is profiled here)."""
    index = item.partition(":")[2]
    if not (index.isascii() and index.isdigit()):
        raise ValueError(f"device {item!r}: the index after ':' must be a number")
    if int(index) >= cpu_devices:
        raise ValueError(
            f"device {item!r} is not present: this process has {cpu_devices} CPU devices "
            f"({CPU}:0..{CPU}:{cpu_devices - 1})"
        )
    return f"{CPU}:{int(index)}"


def _check_sheet(item: str, sheets: dict) -> None:
    """``item`` must be the sheet of a device (not of a link)."""
    if item not in sheets:
        raise ValueError(
            f"device {item!r} has no sheet and is not a CPU device; known: {CPU}, {CPU}:N, "
            f"{', '.join(sorted(n for n, s in sheets.items() if s['kind'] in PLATFORMS))}"
        )
    if sheets[item]["kind"] not in PLATFORMS:
        kind = sheets[item]["kind"]
        raise ValueError(f"{item!r} is a {kind}, not a device (kinds: {', '.join(PLATFORMS)})")


def _placements(model: Model, devices: list[str], group: str, host: bool) -> list[Place]:
    """Every place of ``group``: each device with each backend providing the group on its
    kind; a host backend once, on the first CPU device. Only places the model has costs for
    (`Model.costed`: a replay backend's CPU profile, a host backend's measured costs)."""
    kinds = {d: model.kind(d) for d in devices}
    out = [Place(b.name, d) for d in devices for b in providing(group, kinds[d]) if not b.host]
    cpus = [d for d in devices if kinds[d] == CPU]
    if host and cpus:
        out += [Place(b.name, cpus[0]) for b in providing(group, CPU) if b.host]
    return [p for p in out if model.costed(group, p)]


def enumerate_mappings(
    model: Model, devices: Iterable[str], host: bool = True
) -> list[dict[str, Place]]:
    """Every placement of actors, replay and learner on ``devices`` that the registry offers
    (``host``: include host backends), once up to a swap of this machine's CPU devices (the
    first CPU device used is the first given, and so on).

    Raises:
      ValueError: a device that is neither a CPU device nor a device sheet (a link's sheet).
    """
    devices = list(devices)
    for d in devices:
        if model.kind(d) not in PLATFORMS:
            raise ValueError(f"{d!r} is a {model.kind(d)}, not a device; devices: {PLATFORMS}")
    per_group = [_placements(model, devices, g, host) for g in GROUPS]
    cpus = [d for d in devices if model.kind(d) == CPU]
    combos = (dict(zip(GROUPS, c, strict=True)) for c in itertools.product(*per_group))
    return [places for places in combos if _canonical(places, cpus)]


def _canonical(places: dict[str, Place], cpus: list[str]) -> bool:
    """Whether ``places`` names this machine's CPU devices in the order of ``cpus`` by first
    use (a host backend's device first: it is pinned to the host process). The CPU devices
    cost the same (one profile, `Model`), so a mapping that only swaps them (actors on
    ``cpu:1`` instead of ``cpu:0``) is the same design point and is listed once."""
    pinned = [p.device for p in places.values() if get(p.backend).host]
    used = [p.device for p in places.values() if p.device in cpus]
    order = list(dict.fromkeys(pinned + used))
    return order == cpus[: len(order)]


def search(
    model: Model,
    devices: Iterable[str],
    delay: int = 0,
    present: Iterable[str] = (),
    backends_here: Iterable[str] | None = None,
) -> list[Prediction]:
    """Predictions for every mapping, best first; ``runnable`` marks those whose devices are all
    in ``present`` and whose backends are in ``backends_here`` (default: those that load here)
    and not modeled only: the scheduler can run them."""
    present = set(present)
    here = {n for n in names() if loads(n)} if backends_here is None else set(backends_here)
    out = []
    for places in enumerate_mappings(model, devices):
        p = model.predict(places, delay)
        runnable = p.note == "" and all(
            pl.device in present and pl.backend in here and not get(pl.backend).modeled_only
            for pl in places.values()
        )
        out.append(dataclasses.replace(p, runnable=runnable))
    # ties: fewer distinct devices first (cheaper), then by name for a stable order
    out.sort(
        key=lambda p: (
            -p.trained_samples_per_s,
            len({pl.device for pl in p.places.values()}),
            p.mapping_text(),
        )
    )
    return out


def best_to_run(
    preds: list[Prediction], gpu_sheet: str | None = None, gpu_replay: Iterable[str] = ()
) -> tuple[Prediction, str] | None:
    """The best of ``preds`` (best first, from `search`) that this machine can run, and its
    mapping as the runtime names devices: a runnable one (this machine's CPU devices), or one
    with every group on this machine's GPU, whose device sheet is ``gpu_sheet`` (renamed
    ``gpu:0``), its replay on a backend of ``gpu_replay`` (those that load on the GPU) and the
    other groups on backends that load there. A mapping split between the CPU and the GPU is
    not taken (the one such split run on a GPU, an H200's, was far slower than everything on
    it, as predicted). None when nothing qualifies."""
    replay_ok = set(gpu_replay)
    for p in preds:
        if p.note:
            continue
        if p.runnable:
            return p, p.mapping_text()
        if gpu_sheet is None or any(pl.device != gpu_sheet for pl in p.places.values()):
            continue
        others_ok = all(
            loads(pl.backend) and GPU in get(pl.backend).platforms
            for g, pl in p.places.items()
            if g != "replay"
        )
        if p.places["replay"].backend in replay_ok and others_ok:
            return p, p.mapping_text().replace(f"@{gpu_sheet}", f"@{GPU}:0")
    return None

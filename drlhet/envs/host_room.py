"""How many host environments this machine can take: what one more costs in resident memory
and time, measured on a few of them (`cost_each`), and the refusal of a count that would need
more memory than is available (`room`), before the rest are made; a progress bar while they are
made (`making_bar`). Host side only (no JAX): `make_host_env` refuses (`refuse_past_room`) a
count, every seed's, that would not fit, as the configuration is checked, and
`drlhet.envs.host`'s pools refuse the seeds they are called with before they make the rest.

A gymnasium environment is one Python simulator, made one by one: measured on the 2-core VM
(2026-12-01), CartPole-v1 2.6 KiB and 0.18 ms each over 10,000, MuJoCo's Hopper-v5 1.0 MiB and
6 ms each over 200 (so 100,000 Hoppers: ~100 GiB and 10 minutes, more than the VM has;
nothing checked such a count before, and none was run to its end). The figure from `PROBES`
environments is a lower bound when the simulator's memory grows after it is made (Hopper's:
0.7-1.0 MiB each measured on 8).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from drlhet.machine import available_memory, resident_memory, size_text

__all__ = [
    "MEASURE_FROM",
    "PROBES",
    "TooManyEnvs",
    "cost_each",
    "room",
    "refuse_past_room",
    "making_bar",
]

MEASURE_FROM = 256
"""Environments (of all seeds) from which what one costs is measured before the rest are made,
and the whole refused when this machine lacks the memory (`room`): below, never (a few
hundred of any gymnasium environment fit)."""
PROBES = 8
"""Environments made, after the first (which may import the simulator's modules), to measure
what one more costs in resident memory and time."""


class TooManyEnvs(ValueError):
    """More host environments than this machine has the memory for (`refuse_past_room`): the
    caller names the count that asked for them (``num_envs``, ``eval_envs``, ``episodes``)."""


def cost_each(make: Callable[[], Any], made: list) -> tuple[float, float]:
    """``(bytes, seconds)`` one more environment costs: `PROBES` of them made by ``make`` (and
    appended to ``made``), this process's resident memory read before and after; 0 bytes
    where it cannot be read."""
    before, t = resident_memory(), time.perf_counter()
    for _ in range(PROBES):
        made.append(make())
    seconds, after = (time.perf_counter() - t) / PROBES, resident_memory()
    grown = 0 if before is None or after is None else max(0, after - before)
    return grown / PROBES, seconds


def room(count: int, made: int, each: tuple[float, float]) -> str:
    """Why ``count`` environments, ``made`` of them made, each costing ``each`` (`cost_each`),
    cannot be made here, in words, or "" when this machine has the memory (or does not say)."""
    have = available_memory()
    need = int(each[0] * (count - made))
    if have is None or need <= have[0]:
        return ""
    return (
        f"{count:,} environments (one Python simulator each, on the host) would need "
        f"~{size_text(need)} more ({size_text(int(each[0]))} each and {1e3 * each[1]:.1f} ms "
        f"to make, measured on {PROBES}), this machine has {size_text(have[0])} available "
        f"({have[1]}); ask for fewer environments (num_envs, eval_envs) or seeds"
    )


def refuse_past_room(name: str, count: int, make: Callable[[], Any]) -> None:
    """Raises `TooManyEnvs` (``"<name>: ..."``, `room`'s words) when ``count`` environments
    of ``name`` would not fit, from `MEASURE_FROM` on, measured on `PROBES` that ``make``
    makes (and that are closed again)."""
    if count < MEASURE_FROM:
        return
    probes: list = []
    try:
        why = room(count, 0, cost_each(make, probes))
    finally:
        for env in probes:
            env.close()
    if why:
        raise TooManyEnvs(f"{name}: {why}")


def making_bar(name: str, total: int, made: int):
    """The progress bar over the environments made, shown once making them has taken 2 s (on
    a terminal only)."""
    from tqdm import tqdm

    return tqdm(
        total=total, initial=made, desc=f"making {name} environments", unit="env", delay=2.0,
        leave=False, disable=None, dynamic_ncols=True,
    )  # fmt: skip

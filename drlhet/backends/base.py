"""The backend registry: every backend describes itself, and everything else reads it.

A *backend* implements one or more *groups* of the training loop's primitives (docs/design.md
sections 1 and 3) on one or more *platforms*:

* groups: ``actors`` (act + env_step), ``replay`` (insert, sample, update: the buffer lives in
  one place) and ``learner`` (train);
* platforms: the kinds of device, ``cpu`` and ``gpu`` (XLA devices) and ``fpga``.

A `Backend` says which groups it provides, on which platforms, what it needs to load, and how
fast it is relative to the others (``rank``: the default for a group on a platform is the
highest-ranked backend that loads). Its loader runs on first use, so importing drlhet never
touches a device or a library; a backend that cannot run here raises `BackendUnavailable`
naming what is missing. A backend with no loader is *modeled only*: the DSE costs it from a
profile or a device sheet, the scheduler never runs it.

The mapping validation, the DSE's enumeration and the CLI read this registry; no other module
names a backend or a platform. Backend modules are the other modules of this package, found and
imported on the first query, so adding a backend is adding one module. This module imports no
JAX (the DSE's pure model reads it).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

__all__ = [
    "CPU",
    "GPU",
    "FPGA",
    "PLATFORMS",
    "GROUPS",
    "GROUP_PRIMITIVES",
    "LOOP_ORDER",
    "Backend",
    "BackendUnavailable",
    "Placement",
    "register",
    "get",
    "load",
    "loads",
    "names",
    "providing",
    "default",
    "reference",
    "describe",
]

CPU, GPU, FPGA = "cpu", "gpu", "fpga"
PLATFORMS = (CPU, GPU, FPGA)
"""Kinds of device. ``cpu`` and ``gpu`` are also JAX platform names (``jax.devices(CPU)``)."""

GROUPS = ("actors", "replay", "learner")
GROUP_PRIMITIVES = {
    "actors": ("act", "env_step"),
    "replay": ("insert", "sample", "update"),
    "learner": ("train",),
}
LOOP_ORDER = ("act", "env_step", "insert", "sample", "train", "update")
"""The primitives of one learner step in the order the loop runs them."""


class BackendUnavailable(RuntimeError):
    """A backend cannot run here; the message says what is missing."""


@dataclasses.dataclass(frozen=True)
class Placement:
    """One group's place: ``backend`` on ``device`` (``cpu:0``; in the DSE also a device
    sheet's name, ``h100``, ``u250``)."""

    backend: str
    device: str

    def __str__(self) -> str:
        return f"{self.backend}@{self.device}"


@dataclasses.dataclass(frozen=True)
class Backend:
    """What a backend is, where it runs, and how to load it.

    Attributes:
      name: the name users write (``--backend NAME``, ``replay=NAME@cpu:1``).
      platforms: device kinds it runs on (`PLATFORMS`).
      provides: groups it implements (`GROUPS`).
      needs: what it needs to load, in words (shown by ``drlhet backends``).
      loader: ``() -> implementation``, or None for a modeled-only backend. For a backend that
        provides ``replay`` the implementation is a `drlhet.replay.sum_tree.TreeOps`.
      learner: for a backend that runs the learner step itself, ``() -> wrap`` where
        ``wrap(algo, config, agent, obs_shape, outputs, batch, bounds=) -> AgentFns`` swaps the
        agent's ``update`` for its own; None: the agents' JAX step (`drlhet.agents`) is its learner.
      board_learner: for a learner backend whose hardware module also runs on a board,
        ``(where) -> wrap`` (as ``learner``'s) that runs each step there: ``where`` a bitstream's
        path, or ``"sim"`` for the module's synthesized top simulated through its host protocol
        (`TrainConfig.learner_board`). None: no board.
      board_replay: for a replay backend whose hardware module also runs on a board,
        ``(where, capacity, branching, batch) -> TreeOps`` with the tree on the board at
        ``where`` (a bitstream's path, or ``"sim"``), opened before a run starts
        (`TrainConfig.replay_board`). None: no board.
      rank: preference among the backends that load (higher: faster where measured).
      host: runs in the host process outside XLA (one placement: the first CPU device).
      reference: the pure-JAX reference every other backend is tested against.
      numbers: the replay tree's numbers, ``"float"`` or ``"fixed"``: which reference it
        matches bit for bit (`drlhet.replay.sum_tree` or `drlhet.replay.fixed_point`).
      simulation: ``(platform, groups)``: it also runs ``groups`` on ``platform`` as a
        functional simulation of its hardware (right results, not that hardware's speed);
        never a default nor a DSE candidate there (`providing` leaves it out unless asked).
      accepts: ``(capacity, K) -> why`` its replay cannot hold such a tree (empty: it can),
        asked before a run starts; None: any tree.
      holds: the trees ``accepts`` lets through, in words (shown by ``drlhet backends``).
      summary: one line for listings.
      settings: ``() -> text`` naming what its module-level path switches say now (read when
        a program is traced, so they change what is measured): part of a measured profile's
        cache key. None: it has none.
    """

    name: str
    platforms: tuple[str, ...]
    provides: tuple[str, ...]
    needs: str
    loader: Callable[[], Any] | None
    learner: Callable[[], Any] | None = None
    board_learner: Callable[[str], Any] | None = None
    board_replay: Callable[[str, int, int, int], Any] | None = None
    rank: int = 0
    host: bool = False
    reference: bool = False
    numbers: str = "float"
    simulation: tuple[str, tuple[str, ...]] | None = None
    accepts: Callable[[int, int], str] | None = None
    holds: str = ""
    summary: str = ""
    settings: Callable[[], str] | None = None

    def __post_init__(self) -> None:
        bad = [p for p in self.platforms if p not in PLATFORMS]
        if self.simulation is not None:
            sim, groups = self.simulation
            bad += [x for x in (sim, *groups) if x not in PLATFORMS + self.provides]
        bad += [g for g in self.provides if g not in GROUPS]
        if bad or not self.platforms or not self.provides:
            raise ValueError(f"backend {self.name!r}: bad platforms/groups {bad or '(empty)'}")

    @property
    def modeled_only(self) -> bool:
        return self.loader is None

    def runs_on(self, platform: str, group: str) -> bool:
        """Whether it runs ``group`` on ``platform``, on the hardware or simulated."""
        return (platform in self.platforms and group in self.provides) or self.simulates(
            platform, group
        )

    def simulates(self, platform: str, group: str | None = None) -> bool:
        """Whether it runs (``group``) on ``platform`` only as a simulation."""
        if self.simulation is None:
            return False
        sim, groups = self.simulation
        return platform == sim and (group is None or group in groups)

    def refuses(self, tree: tuple[int, int] | None) -> str:
        """Why its replay cannot hold a sum tree of ``(capacity, K)`` ``tree`` (`accepts`);
        empty when it can, when it holds any tree, or for no tree (uniform replay)."""
        return self.accepts(*tree) if tree is not None and self.accepts is not None else ""


_REGISTRY: dict[str, Backend] = {}
_LOADED: dict[str, Any] = {}
_DISCOVERED = [False]


def register(backend: Backend) -> Backend:
    """Adds ``backend`` (replacing one of the same name); returns it."""
    _REGISTRY[backend.name] = backend
    _LOADED.pop(backend.name, None)
    return backend


def _discover() -> None:
    """Imports every backend module of this package once (each registers itself)."""
    if _DISCOVERED[0]:
        return
    _DISCOVERED[0] = True
    package = importlib.import_module(__name__.rpartition(".")[0])
    for info in pkgutil.iter_modules(package.__path__):
        if info.name != "base":
            importlib.import_module(f"{package.__name__}.{info.name}")


def names() -> list[str]:
    """Every registered backend, loadable here or not."""
    _discover()
    return sorted(_REGISTRY)


def get(name: str) -> Backend:
    """The description of backend ``name`` (nothing is loaded).

    Raises:
      BackendUnavailable: no backend of that name is registered.
    """
    _discover()
    if name not in _REGISTRY:
        raise BackendUnavailable(f"no backend {name!r}; registered: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def load(name: str) -> Any:
    """The implementation of backend ``name``, loaded on first use and cached.

    Raises:
      BackendUnavailable: unknown, modeled only, or missing something here (the message says
        what).
    """
    backend = get(name)
    if name in _LOADED:
        return _LOADED[name]
    if backend.loader is None:
        raise BackendUnavailable(
            f"backend {name!r} is modeled only (the DSE costs it; nothing runs it): {backend.needs}"
        )
    impl = backend.loader()
    _LOADED[name] = impl
    return impl


def loads(name: str) -> bool:
    """Whether backend ``name`` loads on this machine."""
    try:
        load(name)
    except BackendUnavailable:
        return False
    return True


def providing(
    group: str, platform: str | None = None, runnable: bool = False, simulated: bool = False
) -> list[Backend]:
    """Backends that provide ``group`` (on ``platform`` if given), best ranked first; with
    ``runnable``, only those that load here; with ``simulated``, also those that only simulate
    their hardware on ``platform`` (`Backend.simulates`)."""
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r}; groups: {GROUPS}")
    _discover()
    out = [
        b
        for b in _REGISTRY.values()
        if (group in b.provides and (platform is None or platform in b.platforms))
        or (simulated and platform is not None and b.simulates(platform, group))
    ]
    if runnable:
        out = [b for b in out if loads(b.name)]
    return sorted(out, key=lambda b: (-b.rank, b.name))


def default(group: str, platform: str, tree: tuple[int, int] | None = None) -> str:
    """The fastest backend of ``group`` on ``platform`` that loads here; with ``tree``
    (``(capacity, K)`` of the replay's sum tree), the fastest that also holds such a tree
    (`Backend.accepts`).

    Raises:
      BackendUnavailable: none loads (the message lists why each failed).
    """
    candidates = providing(group, platform)
    if not candidates:
        implement = sorted({p for b in providing(group) for p in b.platforms})
        raise BackendUnavailable(
            f"no backend implements the {group} on {platform!r} (they run on {implement}); "
            f"place the {group} on one of those"
        )
    why = []
    for b in candidates:
        refused = b.refuses(tree)
        if refused:
            why.append(f"{b.name}: {refused}")
            continue
        try:
            load(b.name)
        except BackendUnavailable as e:
            why.append(f"{b.name}: {e}")
            continue
        return b.name
    raise BackendUnavailable(f"no backend of the {group} loads on {platform!r}: {why}")


def reference() -> str:
    """The name of the reference backend (pure JAX)."""
    _discover()
    return next(b.name for b in _REGISTRY.values() if b.reference)


def describe() -> list[dict[str, Any]]:
    """Every backend as a row: name, platforms, groups, rank, whether it loads here and why
    not (for ``drlhet backends``)."""
    rows = []
    for name in names():
        b = get(name)
        try:
            load(name)
            status = "loads"
        except BackendUnavailable as e:
            status = str(e)
        rows.append(
            {
                "name": b.name,
                "platforms": list(b.platforms),
                "provides": list(b.provides),
                "rank": b.rank,
                "simulation": list(b.simulation or ()),
                "status": status,
                "summary": b.summary,
                "holds": b.holds,
            }
        )
    return rows

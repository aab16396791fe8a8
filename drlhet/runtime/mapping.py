"""Where each group of the loop runs: a `Mapping`, its validation and its segments.

A mapping places the three groups (docs/design.md sections 1 and 6) as ``backend@device``:
the actors (act, env_step), the replay buffer (insert, sample, update: the buffer lives in one
place) and the learner (train). Which backend may run which group on which kind of device is
read from the registry (`drlhet.backends`). Consecutive primitives on one device form a
*segment* (`segments`); a one-segment mapping runs as one fused ``lax.scan``.
"""

from __future__ import annotations

import dataclasses
import re

import jax

from drlhet import backends
from drlhet.backends import GROUPS, LOOP_ORDER, BackendUnavailable, Placement
from drlhet.backends.base import GROUP_PRIMITIVES

__all__ = [
    "Placement",
    "parse_placement",
    "Mapping",
    "resolve_device",
    "canonical_device",
    "segments",
    "cpu_devices_named",
    "device_index",
    "replay_backend_named",
]

_GROUP_OF = {p: g for g, ps in GROUP_PRIMITIVES.items() for p in ps}


def parse_placement(text: str, group: str, tree: tuple[int, int] | None = None) -> Placement:
    """``"backend@device"``, or a bare ``"device"`` (the group's default backend there; for the
    replay, the fastest that holds a ``(capacity, K)`` ``tree``)."""
    text = text.strip()
    if text.count("@") > 1 or not text or text.startswith("@") or text.endswith("@"):
        raise ValueError(f"{group}={text!r}: expected backend@device or a device")
    if "@" in text:
        backend, device = text.split("@")
        return Placement(backend.strip(), canonical_device(device))
    device = canonical_device(text)
    return Placement(backends.default(group, _platform(device), tree), device)


def canonical_device(name: str) -> str:
    """A device's one spelling, ``kind:index``: ``"cpu"``, ``"cpu:"``, ``"cpu : 0"`` and
    ``"cpu:00"`` are all ``"cpu:0"``, so that placements on one device compare equal
    (`segments` fuses them).

    Raises:
      ValueError: an unknown kind of device or an index that is not a number.
    """
    kind, colon, index = name.partition(":")
    name = f"{kind.strip()}{colon}{index.strip()}"  # "cpu : 0" is cpu:0 too
    return f"{_platform(name)}:{device_index(name)}"


@dataclasses.dataclass(frozen=True)
class Mapping:
    """Where each group runs.

    ``Mapping.parse("actors=cpu:0,replay=native@cpu:1,learner=cpu:1")`` sets groups; a key may
    also name a primitive (``sample=...``), which must then agree with the rest of its group.
    """

    actors: Placement
    replay: Placement
    learner: Placement

    @classmethod
    def fused(
        cls, device: str, replay_backend: str | None = None, tree: tuple[int, int] | None = None
    ) -> Mapping:
        """Every group on ``device``; the replay on ``replay_backend`` (default: the fastest
        that loads there and holds a tree of ``(capacity, K)`` ``tree``), the others on their
        default backend."""
        device = canonical_device(device)
        rb = replay_backend or backends.default("replay", _platform(device), tree)
        return cls(
            parse_placement(device, "actors"),
            Placement(rb, device),
            parse_placement(device, "learner"),
        )

    @classmethod
    def parse(cls, text: str, tree: tuple[int, int] | None = None) -> Mapping:
        """Parses ``key=backend@device`` pairs separated by commas; every group must be set. A
        bare device takes the group's default backend (`parse_placement`, ``tree``)."""
        got: dict[str, Placement] = {}
        seen: set[str] = set()
        if text.strip().lower() == "auto":
            raise ValueError(
                "mapping 'auto' is drlhet train's (it profiles this machine and asks the DSE); "
                "from Python, drlhet.cli.dse.auto_mapping(cfg, cfg.delay) returns the text of "
                "the mapping it picks"
            )
        for item in filter(None, (t.strip() for t in text.split(","))):
            if "=" not in item:
                raise ValueError(f"mapping item {item!r} is not key=backend@device")
            key, value = (x.strip() for x in item.split("=", 1))
            group = key if key in GROUPS else _GROUP_OF.get(key)
            if group is None:
                raise ValueError(f"unknown group or primitive {key!r}; use {GROUPS + LOOP_ORDER}")
            place = parse_placement(value, group, tree if group == "replay" else None)
            if key in seen:
                raise ValueError(f"mapping {text!r} places {key} twice")
            seen.add(key)
            if got.setdefault(group, place) != place:
                raise ValueError(
                    f"the {group} ({', '.join(GROUP_PRIMITIVES[group])}) must share one "
                    f"backend@device, got {got[group]} and {place}"
                )
        missing = [g for g in GROUPS if g not in got]
        if missing:
            raise ValueError(f"mapping {text!r} does not place {missing}")
        return cls(**got)

    def places(self) -> dict[str, Placement]:
        """Group -> placement."""
        return {g: getattr(self, g) for g in GROUPS}

    def validate(self) -> dict[str, jax.Device]:
        """Checks every placement against the registry and this process's devices.

        Returns:
          group -> the JAX device it runs on.

        Raises:
          ValueError: a backend on a group or a kind of device it does not implement.
          BackendUnavailable: an unknown, modeled-only or unloadable backend, or an absent
            device.
        """
        out = {}
        for group, place in self.places().items():
            b = backends.get(place.backend)
            dev = resolve_device(place.device)
            if not b.runs_on(dev.platform, group):
                raise ValueError(
                    f"{group}={place}: backend {b.name!r} implements {list(b.provides)} on "
                    f"{list(b.platforms)}, not the {group} on {dev.platform!r}"
                )
            backends.load(place.backend)  # BackendUnavailable names what is missing
            out[group] = dev
        return out

    def __str__(self) -> str:
        return ",".join(f"{g}={p}" for g, p in self.places().items())


def _platform(device: str) -> str:
    platform = device.partition(":")[0]
    if platform not in backends.PLATFORMS:
        raise ValueError(f"device {device!r}: the kind must be one of {backends.PLATFORMS}")
    return platform


def resolve_device(name: str) -> jax.Device:
    """``"cpu:1"`` -> the second CPU device; `BackendUnavailable` when it is absent."""
    platform, i = _platform(name), device_index(name)
    try:
        devices = jax.devices(platform)
    except RuntimeError as e:
        raise BackendUnavailable(f"device {name!r}: no {platform!r} devices here ({e})") from e
    if i >= len(devices):
        hint = (
            " (set jax.config.update('jax_num_cpu_devices', N) before JAX is first used, or pass "
            "--cpu-devices N to drlhet train)"
            if platform == backends.CPU
            else ""
        )
        raise BackendUnavailable(
            f"device {name!r} is not present: this process has {len(devices)} {platform} "
            f"device(s){hint}"
        )
    return devices[i]


def segments(mapping: Mapping) -> list[tuple[str, tuple[str, ...]]]:
    """Consecutive primitives (in loop order) on one device: ``[(device, (primitive, ...))]``."""
    places = mapping.places()
    out: list[tuple[str, list[str]]] = []
    for name in LOOP_ORDER:
        dev = places[_GROUP_OF[name]].device
        if out and out[-1][0] == dev:
            out[-1][1].append(name)
        else:
            out.append((dev, [name]))
    return [(d, tuple(ns)) for d, ns in out]


def device_index(name: str) -> int:
    """The index of a device name: ``"cpu:3"`` -> 3, ``"cpu"`` -> 0.

    Raises:
      ValueError: the index is not a decimal number (``"cpu:x"``, ``"cpu:-1"``).
    """
    index = name.partition(":")[2]
    if index and not (index.isascii() and index.isdigit()):
        what = "a number >= 0" if index.lstrip("-").isdigit() else "a number"
        raise ValueError(f"device {name!r}: the index after ':' must be {what}")
    return int(index or 0)


def cpu_devices_named(text: str) -> int:
    """How many CPU devices a mapping's text needs (1 + the highest CPU index it names).

    Raises:
      ValueError: a CPU device whose index is not a number.
    """
    devices = re.findall(rf"\b{backends.CPU}:[^,@=\s]*", text)
    return 1 + max((device_index(d) for d in devices), default=0)


def replay_backend_named(text: str) -> str | None:
    """The first item of mapping ``text`` that names a backend for the replay (``replay=`` or a
    replay primitive's key with ``backend@device``), or None where the replay is placed on a
    device alone (``replay=cpu:0``) or not at all: uniform replay has no tree for a backend."""
    for item in text.split(","):
        key, _, value = (part.strip() for part in item.partition("="))
        if (key == "replay" or key in GROUP_PRIMITIVES["replay"]) and "@" in value:
            return f"{key}={value}"
    return None

"""Backends: implementations of the loop's primitive groups on a kind of device.

The registry (`drlhet.backends.base`) is the only place that knows backend and platform names;
each other module of this package describes one backend and registers it when first queried.
"""

from drlhet.backends.base import (
    CPU,
    FPGA,
    GPU,
    GROUPS,
    LOOP_ORDER,
    PLATFORMS,
    Backend,
    BackendUnavailable,
    default,
    describe,
    get,
    load,
    loads,
    names,
    providing,
    reference,
    register,
)

__all__ = [
    "CPU",
    "GPU",
    "FPGA",
    "PLATFORMS",
    "GROUPS",
    "LOOP_ORDER",
    "Backend",
    "BackendUnavailable",
    "register",
    "get",
    "load",
    "loads",
    "names",
    "providing",
    "default",
    "reference",
    "describe",
    "tree_ops",
]


def tree_ops(name: str):
    """The `drlhet.replay.sum_tree.TreeOps` of replay backend ``name``.

    Raises:
      BackendUnavailable: ``name`` is unknown, does not provide the replay, or cannot load here.
    """
    if "replay" not in get(name).provides:
        raise BackendUnavailable(f"backend {name!r} does not implement the replay buffer")
    return load(name)

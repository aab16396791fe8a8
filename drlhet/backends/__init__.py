"""Backends: implementations of the loop's primitive groups on a kind of device.

The registry (`drlhet.backends.base`) is the only place that knows backend and platform names;
each other module of this package describes one backend and registers it when first queried.
"""

from drlhet.backends import base
from drlhet.backends.base import *  # noqa: F403  (the registry's API)
from drlhet.backends.base import BackendUnavailable, get, load

__all__ = [*base.__all__, "tree_ops", "learner_step", "board_tree_ops"]


def tree_ops(name: str):
    """The `drlhet.replay.sum_tree.TreeOps` of replay backend ``name``.

    Raises:
      BackendUnavailable: ``name`` is unknown, does not provide the replay, or cannot load here.
    """
    if "replay" not in get(name).provides:
        raise BackendUnavailable(f"backend {name!r} does not implement the replay buffer")
    return load(name)


def learner_step(name: str, board: str | None = None):
    """How learner backend ``name`` trains: ``wrap(algo, config, agent, obs_shape, outputs, batch,
    bounds=(low, high)) -> AgentFns`` (its own step in place of the agent's), or None (the
    agent's JAX step); ``board``: its module on a board (`Backend.board_learner`).

    Raises:
      BackendUnavailable: ``name`` is unknown, does not provide the learner, cannot load here,
        or has no board; the board's own (no driver, no board, no bitstream).
    """
    b = get(name)
    if "learner" not in b.provides:
        raise BackendUnavailable(f"backend {name!r} does not implement the learner")
    if board is not None:
        if b.board_learner is None:
            on = [n for n in base.names() if get(n).board_learner is not None]
            raise BackendUnavailable(f"learner {name!r} runs on no board ({', '.join(on)} do)")
        load(name)
        return b.board_learner(board)
    if b.learner is None:
        return None
    load(name)  # BackendUnavailable names what is missing
    return b.learner()


def board_tree_ops(name: str, where: str, capacity: int, branching: int, batch: int):
    """The `drlhet.replay.sum_tree.TreeOps` of replay backend ``name`` with its tree on the
    board at ``where`` (`Backend.board_replay`), for ``capacity`` leaves at K ``branching``,
    sampling ``batch`` a command.

    Raises:
      BackendUnavailable: ``name`` is unknown, does not provide the replay, cannot load here,
        or has no board; the board's own (no driver, no board, no bitstream).
      ValueError: a tree or batch the board cannot take, or a bitstream built for another.
    """
    b = get(name)
    if "replay" not in b.provides:
        raise BackendUnavailable(f"backend {name!r} does not implement the replay buffer")
    if b.board_replay is None:
        on = [n for n in base.names() if get(n).board_replay is not None]
        raise BackendUnavailable(f"replay {name!r} runs on no board ({', '.join(on)} do)")
    load(name)
    return b.board_replay(where, capacity, branching, batch)

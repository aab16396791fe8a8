"""A run's state whose replay tree is on a board (``TrainConfig.replay_board``), in and out of
checkpoints.

docs/design.md section 3 ("The replay board in the training loop"). The state names the board's
tree (`drlhet.backends.fpga_replay_board.BoardTreeState`) instead of holding it, so a
checkpoint saves the tree read back from the board, in the form the replay module's
C-simulation holds (`drlhet.replay.fixed_point.FixedTreeState`), and a resume loads it onto the
board. A checkpoint of a board's run and one of the C-simulation's are therefore the same state:
a resume may move the tree onto a board or off it (`drlhet.runtime.run.RESUMABLE`).
"""

from __future__ import annotations

from typing import Any

from drlhet.backends.fpga_replay_board import BoardTreeState, load, read_back
from drlhet.replay.fixed_point import FixedTreeState
from drlhet.runtime.config import TrainConfig

__all__ = ["saved_form", "onto_board"]


def _tree(states: Any) -> Any:
    replay = getattr(states, "replay", None)
    return getattr(replay, "tree", None)


def _with_tree(states: Any, tree: Any) -> Any:
    return states._replace(replay=states.replay._replace(tree=tree))


def saved_form(states: Any) -> Any:
    """``states`` as a checkpoint holds them: a tree on a board read back from it (the
    board's writes must be the state's: `drlhet.backends.fpga_replay_board.StaleBoardState`);
    any other state as it is."""
    tree = _tree(states)
    return _with_tree(states, read_back(tree)) if isinstance(tree, BoardTreeState) else states


def onto_board(states: Any, cfg: TrainConfig) -> Any:
    """``states`` to start ``cfg`` from: with a replay board, a fixed-point tree (a
    checkpoint's) loaded onto it (`drlhet.backends.fpga_replay_board.load`); any other state
    as it is (a run then refuses one whose shapes are not its own)."""
    tree = _tree(states)
    if cfg.replay_board is None or not isinstance(tree, FixedTreeState):
        return states
    return _with_tree(states, load(tree, cfg.replay_board))

"""The FPGA learner module (``hls/learner``) on a board: one learner step a call through the
synthesized top's host protocol (``learner_top.h``: load, step, store, info).

docs/design.md section 3 ("The FPGA learner module"). `board_call` is a ``call`` for
`drlhet.backends.fpga_learner.wrap` (which otherwise calls the C-simulation's FFI targets):
the agent's ``update`` then runs on a board from a host callback inside the jitted program, with
the same operands and results, so its packing of flax/optax trees into the module's parameter
memory is shared. Each call loads the memories, runs the step and stores them back (the board
keeps them on chip between commands; a run of steps on one board could skip the load when
nothing else changed them: not done, every call is correct alone). A board speaks through
`LearnerBoard.run`; `drlhet.backends.fpga_learner_links` has pyxrt's, pynq's and the top's own
C-simulation (`SimulatedLearnerBoard`), which runs this protocol bit for bit as a bitstream
built from the same sources would.

Before its first step on a board, `board_call` asks the bitstream (the info command, with a
nonce its answer echoes) for the network it was built for and refuses another, naming each
differing value: one bitstream trains one network shape (``LEARNER_*`` macros).
"""

from __future__ import annotations

import math
import secrets
import threading
import weakref
from collections.abc import Callable
from typing import NamedTuple, Protocol

import jax
import numpy as np

from drlhet.backends.learner_spec import memory_words

__all__ = [
    "LearnerBoard",
    "LearnerBuild",
    "board_call",
    "board_wrap",
    "SIM",
    "check_learner_build",
    "LOAD",
    "STEP",
    "STORE",
    "INFO",
    "HYPER",
    "INFO_WORDS",
    "MAX_BATCH",
]

LOAD, STEP, STORE, INFO = 0, 1, 2, 3
"""The protocol's commands (``learner_top.h``: kLoad, kStep, kStore, kInfo)."""
HYPER = 16
"""Doubles in the hyper-parameter buffer (``kHyper``)."""
INFO_WORDS = 12
INFO_MAGIC = 0x4C524E
PROTOCOL_VERSION = 1
MAX_BATCH = 256
"""The module's largest batch (``kMaxBatch``, hls/learner/memory.h)."""
SIM = "sim"
"""`board_wrap`'s board for the synthesized top's C-simulation (`SimulatedLearnerBoard`)."""
DQN, DDPG = "drlhet_learner_dqn", "drlhet_learner_ddpg"
"""The FFI targets `drlhet.backends.fpga_learner.wrap` calls (and `board_call` stands for)."""


class LearnerBoard(Protocol):
    """A board that serves the protocol: ``run(cmd [4] uint32, hyper [16] float64, inputs
    float32, out_words) -> (cmd [4] as the board left it, out [out_words] float32)``."""

    def run(
        self, cmd: np.ndarray, hyper: np.ndarray, inputs: np.ndarray, out_words: int
    ) -> tuple[np.ndarray, np.ndarray]: ...


class LearnerBuild(NamedTuple):
    """The network a bitstream trains (its ``LEARNER_*`` macros)."""

    algo: int  # 0: DQN, 1: DDPG / TD3
    obs: int
    actions: int  # DQN: discrete actions; DDPG: the action's dimension
    hidden: tuple[int, int, int]  # widths, 0: absent
    dueling: int
    critics: int

    @classmethod
    def of(cls, target: str, attrs: dict) -> LearnerBuild:
        """The build an FFI call of ``target`` with ``attrs`` needs (`fpga_learner.wrap`)."""
        widths = (int(attrs["w0"]), int(attrs["w1"]), int(attrs["w2"]))
        ddpg = target == DDPG
        return cls(
            int(ddpg),
            int(attrs["obs_dim"]),
            int(attrs["actions"]),
            widths,
            0 if ddpg else int(attrs["dueling"]),
            int(attrs["critics"]) if ddpg else 1,
        )

    @classmethod
    def for_agent(cls, algo: str, config, obs_dim: int, outputs: int) -> LearnerBuild:
        """The build that trains ``algo``'s agent of ``config`` (`drlhet.agents`) on
        observations of ``obs_dim`` with ``outputs`` actions (DQN) or action dimensions."""
        h = (*(int(w) for w in config.hidden), 0, 0, 0)
        hidden = (h[0], h[1], h[2])
        if algo == "dqn":
            return cls(0, obs_dim, outputs, hidden, int(config.dueling), 1)
        return cls(1, obs_dim, outputs, hidden, 0, 2 if config.td3 else 1)

    def macros(self) -> dict[str, int]:
        """The ``LEARNER_*`` macros that build it (``hls/learner/learner_top.h``)."""
        names = ("ALGO", "OBS", "ACTIONS", "H0", "H1", "H2", "DUELING", "CRITICS")
        values = (self.algo, self.obs, self.actions, *self.hidden, self.dueling, self.critics)
        return {f"LEARNER_{n}": int(v) for n, v in zip(names, values, strict=True)}

    def memory_words(self) -> int:
        """Floats of the memories ``kLoad`` takes (``learner_top.cpp``'s ``kMemory``)."""
        algo = "ddpg" if self.algo == 1 else "dqn"
        return memory_words(
            algo, self.obs, self.hidden, self.actions, bool(self.dueling), self.critics
        )


def check_learner_build(board: LearnerBoard, want: LearnerBuild) -> None:
    """Asks ``board`` for its bitstream's build (one info command) and refuses another.

    Raises:
      ValueError: in one line: a bitstream that does not answer the info command (older than
        protocol version 1, or not the learner module), that speaks another version, or that
        was built for another network (each differing value, the bitstream's and the wanted).
    """
    nonce = secrets.randbits(24)
    cmd = np.array([INFO, nonce, 0, 0], np.uint32)
    _, out = board.run(cmd, np.zeros(HYPER), np.zeros(1, np.float32), INFO_WORDS)
    words = [int(w) for w in np.asarray(out, np.float32)[:INFO_WORDS]]
    rebuild = "rebuild it (hls/learner/run_hls.tcl) with " + " ".join(
        f"{k}={v}" for k, v in want.macros().items()
    )
    if words[0] != INFO_MAGIC or words[1] != nonce:
        raise ValueError(f"the bitstream does not answer the learner's info command: {rebuild}")
    if words[2] != PROTOCOL_VERSION:
        raise ValueError(
            f"the bitstream speaks learner protocol {words[2]}, this driver "
            f"{PROTOCOL_VERSION}: {rebuild}"
        )
    got = LearnerBuild(words[3], words[4], words[5], (words[6], words[7], words[8]), *words[9:11])
    if want.algo == 1:  # a DDPG build's dueling macro plays no part
        got = got._replace(dueling=0)
    else:
        got = got._replace(critics=1)
    differ = [
        f"{name} {there} there, {here} here"
        for name, there, here in zip(LearnerBuild._fields, got, want, strict=True)
        if there != here
    ]
    if differ:
        raise ValueError(f"the bitstream trains another network ({'; '.join(differ)}): {rebuild}")


def _hyper(target: str, attrs: dict) -> np.ndarray:
    """The hyper-parameter buffer ``[16]`` (``learner_top.cpp``'s order) from the FFI call's
    attributes."""
    names: list[str]
    if target == DQN:
        names = ["lr", "b1", "b2", "eps", "max_norm", "huber_delta", "priority_eps", "tau"]
        names += ["period", "double_q", "sgd"]
    else:
        names = ["actor_lr", "critic_lr", "b1", "b2", "eps", "tau", "priority_eps", "low", "high"]
        names += ["td3", "policy_delay"]
    hyper = np.zeros(HYPER, np.float64)
    hyper[: len(names)] = [float(attrs[n]) for n in names]
    return hyper


def board_call(board: LearnerBoard, check: bool = True) -> Callable:
    """A ``call`` for `drlhet.backends.fpga_learner.wrap` that runs each learner step on
    ``board``: ``(target, out_types, aliased) -> (*operands, **attrs) -> results``, the FFI
    target's operands and results, through a host callback (seeds, vmapped, one after
    another). ``check``: ask the bitstream for its build before the first step of a network
    (`check_learner_build`; the check's ``ValueError`` then ends the step).
    """
    checked: set[LearnerBuild] = set()

    def call(target: str, out_types: tuple, aliased: int) -> Callable:
        del aliased  # the results are new host arrays
        if target not in (DQN, DDPG):
            raise ValueError(f"the learner board runs {DQN} and {DDPG}, not {target!r}")

        def step(*operands, **attrs):
            build, hyper = LearnerBuild.of(target, attrs), _hyper(target, attrs)

            def host(*ops):
                if check and build not in checked:
                    with _lock(board):
                        check_learner_build(board, build)
                    checked.add(build)
                return _step(board, target, build, hyper, ops, out_types)

            return jax.pure_callback(host, out_types, *operands, vmap_method="sequential")

        return step

    return call


def board_wrap(where: str) -> Callable:
    """`drlhet.backends.fpga_learner.wrap` (without its ``call``) with each step on the board at
    ``where``: `SIM` (`SimulatedLearnerBoard`: the top built here for the agent's network) or a
    bitstream's path (`open_learner_board`: pyxrt or pynq). The board is opened, and asked for
    its build, when an agent is wrapped: before a run starts.

    Raises (from ``wrap``):
      ValueError: a network the module cannot run, or a bitstream built for another.
      BackendUnavailable: no driver, no board or no bitstream at ``where``; no compiler (`SIM`).
    """
    from drlhet.backends import fpga_learner
    from drlhet.backends.fpga_learner_links import SimulatedLearnerBoard, open_learner_board
    from drlhet.backends.learner_spec import why_not

    def wrap(algo, config, agent, obs_shape, outputs, batch, bounds=(-1.0, 1.0)):
        why = why_not(algo, config.hidden, obs_shape, outputs, batch)
        if why:
            raise ValueError(why)
        build = LearnerBuild.for_agent(algo, config, obs_shape[0], outputs)
        board = SimulatedLearnerBoard(build) if where == SIM else open_learner_board(where, build)
        check_learner_build(board, build)
        call = board_call(board)
        return fpga_learner.wrap(algo, config, agent, obs_shape, outputs, batch, call, bounds)

    return wrap


def _step(board, target, build, hyper, ops, out_types) -> tuple:
    """One learner step on ``board``: load, step, store; the FFI target's results."""
    memories = len(out_types) - (3 if target == DQN else 4)  # 4 (DQN) or 8 (DDPG)
    counts = 1 if target == DQN else 2
    mem = [np.asarray(m, np.float32) for m in ops[:memories]]
    numbers = [int(np.asarray(x)) for x in ops[memories : memories + counts + 1]]
    data = [np.asarray(x) for x in ops[memories + counts + 1 :]]
    b = data[5].shape[0]  # the weights' rows
    if not 1 <= b <= MAX_BATCH:
        raise ValueError(f"learner board: a batch of {b} rows (the module takes 1..{MAX_BATCH})")
    if target == DQN:
        _check_actions(data[1], build.actions)
        data[1] = data[1].astype(np.float32)  # the protocol's actions are floats
    words = sum(m.size for m in mem)
    if words != build.memory_words():
        raise ValueError(f"learner board: {words} memory words, the network has "
                         f"{build.memory_words()}")  # fmt: skip
    *counted, steps = numbers
    # the int32 counts as the board's uint32 words (bit for bit: a step count past 2^31 - 1
    # wraps negative in JAX as on the board)
    load = np.array([LOAD, *counted, *([0] * (2 - counts)), steps - 1], np.int64) & 0xFFFFFFFF
    batch = np.concatenate([np.asarray(x, np.float32).ravel() for x in data])
    metrics = 2 if target == DQN else 3
    with _lock(board):  # load, step, store: one seed's, never interleaved with another's
        board.run(load.astype(np.uint32), hyper, np.concatenate([m.ravel() for m in mem]), 0)
        _, out = board.run(np.array([STEP, b, 0, 0], np.uint32), hyper, batch, b + metrics)
        cmd, stored = board.run(np.array([STORE, 0, 0, 0], np.uint32), hyper, np.zeros(1), words)
    if int(cmd[3]) != (steps & 0xFFFFFFFF):  # the top counts each step it runs
        raise ValueError(
            f"learner board: the step did not run (its step count is {int(cmd[3])} after "
            f"step {steps}): the bitstream refused the batch or does not serve the protocol"
        )
    results: list = []
    at = 0
    for like in out_types[:memories]:
        n = math.prod(like.shape)
        results.append(np.asarray(stored[at : at + n], np.float32).reshape(like.shape))
        at += n
    results += [np.int32(np.uint32(cmd[1 + k]).view(np.int32)) for k in range(counts)]
    return (*results, np.asarray(out[:b], np.float32), np.asarray(out[b : b + metrics], np.float32))


_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCKS_LOCK = threading.Lock()


def _lock(board) -> threading.Lock:
    """The lock of ``board`` (one per board object, shared by every `board_call` on it): the
    host callbacks of seeds, devices or programs may run on several threads at once."""
    with _LOCKS_LOCK:
        try:
            return _LOCKS.setdefault(board, threading.Lock())
        except TypeError:  # not weakly referenceable: a lock per call site's board id
            return _ID_LOCKS.setdefault(id(board), threading.Lock())


_ID_LOCKS: dict[int, threading.Lock] = {}


def _check_actions(action: np.ndarray, actions: int) -> None:
    """The module does nothing for an action outside ``0..actions-1``: refused here, named."""
    bad = (action < 0) | (action >= actions)
    if np.any(bad):
        raise ValueError(f"learner board: action {int(action[bad][0])} outside 0..{actions - 1}")

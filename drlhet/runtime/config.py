"""The static configuration of a training run."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Literal

from drlhet.agents import ddpg, dqn
from drlhet.agents.ddpg import DDPGConfig
from drlhet.agents.dqn import DQNConfig
from drlhet.agents.ranges import HyperparameterError, check_ranges
from drlhet.backends import default, get, names
from drlhet.replay.sum_tree import layout
from drlhet.runtime.field_types import wrong_kind

__all__ = [
    "TrainConfig",
    "ConfigError",
    "check",
    "chunks_of",
    "warmup_steps",
    "n_step_of",
    "with_backend",
    "tree_shape",
    "differences",
    "said",
]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run (static)."""

    algo: Literal["dqn", "ddpg"] = "dqn"
    env: str = "CartPole-v1"
    seeds: int = 1
    """Independent seeds trained together (vmap)."""
    seed: int = 0
    steps: int = 100_000
    """Env steps per seed (all environments together): the warm-up, then as many whole chunks
    of ``eval_every`` as fit after ``warmup`` (`chunks_of`); the warm-up run is ``warmup``
    rounded up to whole iterations plus the n-step fill (`warmup_steps`), which can end a run a
    few steps past ``steps`` (6,008 for 6,000 at the defaults). A Ray run (``--actors``) moves
    in whole actor calls of ``rollout`` x ``num_envs`` env steps; one that would end past
    ``steps`` is refused, naming the ``steps`` to pass."""
    num_envs: int = 4
    sgd_steps: int = 2
    """SGD steps per iteration; replay ratio = sgd_steps / num_envs SGD steps per env step."""
    warmup: int = 1_000
    """Env steps with random actions before learning starts."""
    buffer_size: int = 50_000
    batch_size: int = 128
    n_step: int | None = None
    """n-step returns (sum_i gamma^i r_i over up to n steps of one episode); None: 3 for DQN
    (Rainbow's choice; it made CartPole reliable here), 1 for DDPG. At most steps / num_envs."""
    alpha: float = 0.6
    beta_start: float = 0.4
    """IS exponent at the start, annealed linearly to 1 at the end of training."""
    branching: int = 16
    """K, children per node of the sum tree, 2 to `MAX_BRANCHING` (1024)."""
    backend: str | None = None
    """Replay backend (`drlhet.backends`; ``drlhet backends`` lists them); None: the fastest one
    that loads on the device the replay runs on. Refused with ``uniform``: no tree to hold."""
    learner: str | None = None
    """Learner backend (a mapping's ``learner=NAME@device`` sets it); None: the agents' JAX
    step. ``fpga`` runs the FPGA learner module's C-simulation (DQN and DDPG/TD3)."""
    learner_board: str | None = None
    """Run the learner backend's module on a board instead (``fpga``): a bitstream's path
    (pyxrt or pynq), or ``sim`` for its synthesized top simulated through the board's host
    protocol; one step a host call (drlhet.backends.fpga_learner_board). None: no board."""
    replay_board: str | None = None
    """Keep the replay backend's sum tree on a board instead (``fpga``): a bitstream's path
    (pyxrt or pynq), or ``sim`` for the replay module served through the board's host protocol;
    its write and sample commands are host calls from the compiled programs
    (drlhet.backends.fpga_replay_board). One tree a board: one seed. Checkpoints hold the tree
    read back from the board (drlhet.runtime.board_state). None: no board."""
    uniform: bool = False
    """Uniform replay instead of PER (the baseline)."""
    delay: int = 0
    """Learner steps by which priority updates are delayed (0: strict PER; see replay.delayed).
    With delay >= 1 the actors also act with the parameters of one iteration earlier, so that
    they need not wait for the learner (the host loops of drlhet.runtime.host_loop)."""
    eval_every: int = 5_000
    eval_envs: int = 10
    dqn: DQNConfig = DQNConfig()
    ddpg: DDPGConfig = DDPGConfig()


MAX_SEED = (1 << 32) - 1
"""The largest seed: JAX's key keeps 32 bits of it (``key(2**32)`` is ``key(0)``), so a larger
one would repeat a smaller one's run."""

MAX_BUFFER = (1 << 31) - 1
"""Slots a buffer can have: its indices are int32 inside the jitted program."""

MAX_STEPS = (1 << 31) - 1
"""Env steps a run can have: they are counted in int32 inside the jitted program."""

MAX_BRANCHING = 1024
"""Widest tree node: the programs sum a node's K children one by one (the order every backend
keeps), so they grow with K (one tree write compiled in 2.7 s at K = 2048 and 27 s at 16384
on the 2-core VM; K = 10^8 had taken 14 GiB, still tracing, when it was stopped; the descent
loops over a node wider than 64 children: K = 1024 compiles in 0.6 s). The native and CUDA
backends hold K <= 256."""

_POSITIVE = (
    "steps",
    "num_envs",
    "sgd_steps",
    "batch_size",
    "buffer_size",
    "eval_every",
    "eval_envs",
    "seeds",
)


class ConfigError(ValueError):
    """A bad `TrainConfig`: the message names the fields (``fields``) and their values;
    ``reason``, another's words quoted after it (a backend's), names no field."""

    def __init__(self, message: str, *fields: str, reason: str = ""):
        super().__init__(f"{message}: {reason}" if reason else message)
        self.fields = fields
        self.head, self.reason = message, reason


def check(cfg: TrainConfig) -> None:
    """Raises `ConfigError` (a ``ValueError``) naming the first bad field of ``cfg``: a value
    out of range, sizes that do not fit together, an unknown backend, one that cannot hold
    the tree or one named for uniform replay (no tree), a hyper-parameter out of its range
    (the agents' fields spelled ``dqn.<name>``, ``ddpg.<name>``). (How many chunks fit in
    ``steps`` is `chunks_of`'s check.) A field of another kind than its annotation says
    (``seeds=2.5``, ``uniform="yes"``) is named first (`drlhet.runtime.field_types`)."""
    if not isinstance(cfg, TrainConfig):
        raise ConfigError(f"the configuration must be a TrainConfig, got {type(cfg).__name__}")
    wrong = wrong_kind(cfg)
    if wrong is not None:
        raise ConfigError(wrong[1], wrong[0])
    if cfg.n_step is not None and cfg.n_step < 1:
        raise ConfigError(f"n_step must be >= 1, got {cfg.n_step}", "n_step")
    for name in _POSITIVE:
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name} must be >= 1, got {getattr(cfg, name)}", name)
    if cfg.steps > MAX_STEPS:
        raise ConfigError(
            f"steps must be <= {MAX_STEPS} (the program's counters are int32), got {cfg.steps}",
            "steps",
        )
    if cfg.delay < 0:
        raise ConfigError(f"delay must be >= 0, got {cfg.delay}", "delay")
    if cfg.algo not in ("dqn", "ddpg"):
        raise ConfigError(f"algo must be 'dqn' or 'ddpg', got {cfg.algo!r}", "algo")
    _check_ranges(cfg)
    _check_sizes(cfg)
    _check_backends(cfg)


def _check_ranges(cfg: TrainConfig) -> None:
    """The seed, PER's exponents, and both agents' hyper-parameters (`drlhet.agents.ranges`:
    both tables, so that a value set for the algorithm not run is not silently kept)."""
    if not 0 <= cfg.seed <= MAX_SEED:
        raise ConfigError(
            f"seed must be in [0, {MAX_SEED}] (JAX's key keeps 32 bits of it), got {cfg.seed}",
            "seed",
        )
    if not (math.isfinite(cfg.alpha) and cfg.alpha >= 0):
        raise ConfigError(f"alpha must be finite and >= 0, got {cfg.alpha!r}", "alpha")
    if not 0 <= cfg.beta_start <= 1:
        raise ConfigError(f"beta_start must be in [0, 1], got {cfg.beta_start!r}", "beta_start")
    for prefix, config, rules in (("dqn", cfg.dqn, dqn.RANGES), ("ddpg", cfg.ddpg, ddpg.RANGES)):
        try:
            check_ranges(config, rules)
        except HyperparameterError as e:
            raise ConfigError(f"{prefix}.{e}", f"{prefix}.{e.field}") from None


def _check_sizes(cfg: TrainConfig) -> None:
    """The sizes that must fit together: envs and evaluation period, warm-up, batch, buffer."""
    if cfg.eval_every % cfg.num_envs:
        raise ConfigError(
            f"eval_every ({cfg.eval_every}) must be a multiple of num_envs ({cfg.num_envs})",
            "eval_every",
            "num_envs",
        )
    if cfg.warmup < cfg.batch_size:
        raise ConfigError(
            f"warmup ({cfg.warmup}) must be >= batch_size ({cfg.batch_size})",
            "warmup",
            "batch_size",
        )
    if cfg.batch_size > cfg.buffer_size:
        raise ConfigError(
            f"batch_size ({cfg.batch_size}) must be <= buffer_size ({cfg.buffer_size})",
            "batch_size",
            "buffer_size",
        )
    if cfg.buffer_size > MAX_BUFFER:
        raise ConfigError(
            f"buffer_size must be <= {MAX_BUFFER} (int32 slots), got {cfg.buffer_size}",
            "buffer_size",
        )
    if cfg.branching < 2:
        raise ConfigError(f"branching must be >= 2, got {cfg.branching}", "branching")
    if cfg.branching > MAX_BRANCHING:
        raise ConfigError(
            f"branching must be <= {MAX_BRANCHING} (a node's children are summed one by one: "
            f"the programs grow with it), got {cfg.branching}",
            "branching",
        )
    _check_delay(cfg)
    iterations = cfg.steps // cfg.num_envs
    if n_step_of(cfg) > iterations:  # the warm-up's fill alone would outrun the run
        raise ConfigError(
            f"n_step ({n_step_of(cfg)}) must be <= steps / num_envs ({iterations}), the "
            "iterations of the whole run: a longer window never fills within it",
            "n_step",
            "steps",
            "num_envs",
        )
    nodes = layout(cfg.buffer_size, cfg.branching).size
    if not cfg.uniform and nodes > MAX_BUFFER:
        raise ConfigError(
            f"buffer_size {cfg.buffer_size} at branching {cfg.branching} needs {nodes} tree "
            f"nodes, more than int32 indices reach ({MAX_BUFFER})",
            "buffer_size",
            "branching",
        )


def _check_backends(cfg: TrainConfig) -> None:
    """Registered backend names, and a replay backend that can hold the tree; none named for
    uniform replay, which has no tree (a run still places it: `drlhet.runtime.run`)."""
    # (the messages avoid the fields' own words, which the CLI turns into flags)
    if cfg.uniform and cfg.backend is not None:
        raise ConfigError(
            f"backend {cfg.backend!r} runs a sum tree, and uniform replay has none: drop backend",
            "backend",
            "uniform",
        )
    groups = {"backend": ("replay", "the replay buffer"), "learner": ("learner", "training")}
    for name, (group, does) in groups.items():
        value = getattr(cfg, name)
        offer = ", ".join(n for n in names() if group in get(n).provides)
        if value is not None and value not in names():
            raise ConfigError(f"{name} {value!r} is not registered (for {does}: {offer})", name)
        if value is not None and group not in get(value).provides:
            raise ConfigError(f"{name} {value!r} does not implement {does} ({offer} do)", name)
        if value is not None and get(value).loader is None:
            run = ", ".join(n for n in names() if group in get(n).provides and get(n).loader)
            why = f"is modeled only: the DSE costs it, nothing runs it ({run} run)"
            raise ConfigError(f"{name} {value!r} {why}", name)
    why = get(cfg.backend).refuses(tree_shape(cfg)) if cfg.backend is not None else ""
    if why:
        raise ConfigError(
            f"backend {cfg.backend!r} cannot hold buffer_size {cfg.buffer_size} at branching "
            f"{cfg.branching}",
            "backend",
            "buffer_size",
            "branching",
            reason=why,
        )


def _check_delay(cfg: TrainConfig) -> None:
    """A priority update delayed by ``delay`` learner steps must come within the run: at or
    past its learner steps, none is ever applied and PER samples by insertion priority alone."""
    chunks = (cfg.steps - cfg.warmup) // cfg.eval_every  # (none: chunks_of refuses it)
    learner_steps = chunks * (cfg.eval_every // cfg.num_envs) * cfg.sgd_steps
    if chunks >= 1 and not cfg.uniform and cfg.delay >= learner_steps:
        raise ConfigError(
            f"delay ({cfg.delay}) must be below the run's learner steps ({learner_steps}: "
            f"{chunks} chunks x eval_every / num_envs x sgd_steps): no delayed priority update "
            "would ever be applied",
            "delay",
            "eval_every",
            "num_envs",
            "sgd_steps",
        )


def chunks_of(cfg: TrainConfig) -> int:
    """Chunks of ``eval_every`` env steps that fit in ``steps`` after the warm-up (rounded
    down: a run never goes past ``steps``, apart from the warm-up's rounding, `warmup_steps`).

    Raises:
      ConfigError: not even one chunk fits (``steps < warmup + eval_every``).
    """
    chunks = (cfg.steps - cfg.warmup) // cfg.eval_every
    if chunks < 1:
        raise ConfigError(
            f"steps ({cfg.steps}) must be >= warmup + eval_every ({cfg.warmup} + "
            f"{cfg.eval_every}): training is evaluated once per eval_every after the "
            "warm-up",
            "steps",
            "warmup",
            "eval_every",
        )
    return chunks


def warmup_steps(cfg: TrainConfig) -> int:
    """Env steps per seed before learning starts: ``warmup`` rounded up to a multiple of
    ``num_envs``, plus the ``(n - 1) x num_envs`` steps that first fill the n-step window."""
    rounds = -(-cfg.warmup // cfg.num_envs) + n_step_of(cfg) - 1
    return rounds * cfg.num_envs


def n_step_of(cfg: TrainConfig) -> int:
    """The n of n-step returns: ``cfg.n_step``, or 3 for DQN and 1 for DDPG when unset."""
    if cfg.n_step is not None:
        return cfg.n_step
    return 3 if cfg.algo == "dqn" else 1


def with_backend(cfg: TrainConfig, platform: str) -> TrainConfig:
    """``cfg`` with its replay backend named: the fastest that loads on ``platform`` when
    ``cfg.backend`` is None.

    Raises:
      BackendUnavailable: no replay backend loads on ``platform``.
    """
    if cfg.backend is not None:
        return cfg
    return dataclasses.replace(cfg, backend=default("replay", platform, tree_shape(cfg)))


def tree_shape(cfg: TrainConfig) -> tuple[int, int] | None:
    """``(capacity, K)`` of ``cfg``'s sum tree, which its replay backend must hold; None for
    uniform replay (no tree)."""
    return None if cfg.uniform else (cfg.buffer_size, cfg.branching)


def differences(
    cfg: TrainConfig, other: TrainConfig | dict, ignore: tuple[str, ...] = ()
) -> list[tuple[str, Any, Any]]:
    """``[(field, value in other, value in cfg)]`` of every leaf field (``dqn.learning_rate``)
    where ``cfg`` and ``other`` differ, but those under a top-level name in ``ignore``.
    ``other`` may be a checkpoint's JSON config: a field it lacks has its default, and values
    compare as JSON gives them back (tuples and lists alike; ``1 == 1.0`` as in Python)."""
    if isinstance(other, TrainConfig):
        other = dataclasses.asdict(other)
    here = _flat(dataclasses.asdict(cfg))
    there = _flat(dataclasses.asdict(TrainConfig())) | {
        k: v for k, v in _flat(other).items() if k in here
    }
    return [
        (k, there[k], here[k])
        for k in here
        if k.split(".")[0] not in ignore and here[k] != there[k]
    ]


def said(differ: list[tuple[str, Any, Any]]) -> str:
    """`differences` in words: ``seed 7 there, 0 here; ...``."""
    return "; ".join(f"{k} {json.dumps(a)} there, {json.dumps(b)} here" for k, a, b in differ)


def _flat(config: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = json.loads(json.dumps(v, default=repr))
    return out

"""What every end-to-end runner of the peers comparison takes and reports (stdlib only).

The comparison (`experiments/fig_peers.py`) runs drlhet and the frameworks its users would
otherwise pick (RLlib, Stable-Baselines3, a flashbax-PER loop) on one matched configuration,
each in a fresh process of its own virtual environment, alternating the systems. Every runner
is a script ``python <runner>.py --spec '<json>'`` that reads a `RunSpec`, trains, and prints
JSON lines to stdout, one per event, prefixed with `PREFIX` (anything else it prints is
ignored):

* ``{"kind": "header", "system", "version", "threads", "notes", "import_s", "batch"}`` once,
  after the imports (``import_s``: seconds since launch; ``batch``: the SGD batch the run
  really uses, which a tuned recipe may change);
* ``{"kind": "row", "env_steps", "sgd_updates", "wall_s", "eval_return", "eval_s"}`` after
  every ``eval_every`` env steps (all environments together), ``wall_s`` since launch, the mean
  greedy return over ``eval_episodes`` episodes, ``eval_s`` the seconds spent evaluating so far
  where the runner can tell them apart (None where the evaluation runs inside the training
  program, as drlhet's does: its throughput then counts it, against itself);
* ``{"kind": "end", "wall_s"}`` last.

The harness computes every metric from these rows the same way for every system
(`metrics`): trained samples/s and env steps/s over the rows after the first (the first chunk
holds the imports, compilation and warm-up), less the evaluation where ``eval_s`` says it, and
the wall time from launch to the first row whose return reaches the target. Run the torch
peers with ``OMP_NUM_THREADS=1`` and one torch thread (`ENV_ONE_THREAD`).

This file is imported by the runners in their own virtual environments: standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Any

PREFIX = "@@peers "
ENV_ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
GYMNASIUM = "gymnasium:"
"""drlhet's prefix of a Gymnasium id (``gymnasium:<id>``: the env stepped on the host)."""


def gymnasium_id(env: str) -> str:
    """The Gymnasium id of a spec's ``env``, for the runners that build Gymnasium envs
    themselves (SB3, RLlib): drlhet's ``gymnasium:<id>`` is ``<id>``; any other name (a gymnax
    id, the classic-control ones being Gymnasium's ids too) as it is."""
    return str.removeprefix(env, GYMNASIUM)  # TypeError (a bad spec) for a non-string


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One matched configuration. Replay ratio: ``sgd_steps`` SGD steps of ``batch`` samples
    every ``num_envs`` env steps (one vector step), i.e. ``sgd_steps * batch / num_envs``
    trained samples per env step.

    Attributes:
      algo: "dqn" (discrete) or "td3" (continuous; DDPG with twin critics, target smoothing and
        delayed actor updates).
      env: a Gymnasium / gymnax id both sides know ("CartPole-v1", "Pendulum-v1").
      hidden: hidden layer widths of every network (Q, actor, critic).
      batch, buffer, num_envs, sgd_steps, warmup: as above; ``warmup`` env steps with random
        actions before learning starts.
      n_step: n-step returns where the system allows (else 1, said in the header's notes).
      prioritized: PER (alpha, beta_start annealed to 1) where the system has it.
      lr, gamma, tau: optimizer step, discount, Polyak rate of the target networks.
      epsilon_steps, epsilon_end: DQN's linear exploration schedule (env steps).
      steps: env steps in all (the run stops early once ``stop_at_return`` is reached).
      eval_every, eval_episodes: evaluation cadence (env steps) and episodes per evaluation.
      stop_at_return: stop at the first evaluation whose mean return reaches it (None: never).
      seed: the run's seed.
      recipe: "matched" (this spec) or "tuned" (the system's own published recipe for the
        env, where it has one; the header's notes name it).
    """

    algo: str = "dqn"
    env: str = "CartPole-v1"
    hidden: tuple[int, ...] = (64, 64)
    batch: int = 128
    buffer: int = 50_000
    num_envs: int = 4
    sgd_steps: int = 2
    warmup: int = 1_000
    n_step: int = 3
    prioritized: bool = True
    alpha: float = 0.6
    beta_start: float = 0.4
    lr: float = 5e-4
    gamma: float = 0.99
    tau: float = 0.01
    epsilon_steps: int = 10_000
    epsilon_end: float = 0.02
    steps: int = 100_000
    eval_every: int = 5_000
    eval_episodes: int = 10
    stop_at_return: float | None = 475.0
    seed: int = 0
    recipe: str = "matched"

    @property
    def samples_per_env_step(self) -> float:
        """Trained samples per env step (the replay ratio times the batch)."""
        return self.sgd_steps * self.batch / self.num_envs

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        raw = json.loads(text)
        if "hidden" in raw:
            raw["hidden"] = tuple(raw["hidden"])
        unknown = set(raw) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown RunSpec fields: {sorted(unknown)}")
        return cls(**raw)


def parse_argv(argv: list[str] | None = None) -> tuple[RunSpec, float]:
    """``--spec JSON [--launched-at EPOCH_S]`` -> (spec, launch time). The launch time is the
    harness's ``time.time()`` just before it started the process (so interpreter start-up and
    imports count), else this call's."""
    argv = sys.argv[1:] if argv is None else argv
    args = dict(zip(argv[::2], argv[1::2], strict=False))
    if "--spec" not in args:
        raise SystemExit("usage: <runner>.py --spec JSON [--launched-at EPOCH_S]")
    launched = float(args.get("--launched-at", time.time()))
    return RunSpec.from_json(args["--spec"]), launched


class Reporter:
    """Prints the runner's events (see the module docstring), timing from the launch."""

    def __init__(self, launched_at: float) -> None:
        self.launched_at = launched_at

    def since_launch(self) -> float:
        return time.time() - self.launched_at

    def emit(self, kind: str, **fields: Any) -> None:
        print(PREFIX + json.dumps({"kind": kind, **fields}), flush=True)

    def header(
        self, system: str, version: str, threads: str, notes: str = "", batch: int | None = None
    ) -> None:
        """``batch``: the SGD batch the run uses, when a recipe changes the spec's."""
        self.emit(
            "header",
            system=system,
            version=version,
            threads=threads,
            notes=notes,
            import_s=self.since_launch(),
            batch=batch,
        )

    def row(
        self,
        env_steps: int,
        sgd_updates: int,
        eval_return: float | None,
        eval_s: float | None = None,
    ) -> None:
        """``eval_s``: seconds spent evaluating since launch (None: not separable)."""
        self.emit(
            "row",
            env_steps=int(env_steps),
            sgd_updates=int(sgd_updates),
            wall_s=self.since_launch(),
            eval_return=None if eval_return is None else float(eval_return),
            eval_s=eval_s,
        )

    def end(self) -> None:
        self.emit("end", wall_s=self.since_launch())


def read_events(stdout: str) -> list[dict]:
    """The events a runner printed (lines starting with `PREFIX`), in order."""
    return [
        json.loads(line[len(PREFIX) :]) for line in stdout.splitlines() if line.startswith(PREFIX)
    ]


def metrics(spec: RunSpec, events: list[dict]) -> dict:
    """The comparison's metrics from one run's events, the same way for every system:
    ``trained_samples_per_s`` and ``env_steps_per_s`` between the first and the last row
    (steady state: the first chunk holds compilation and warm-up; None when the run stopped at
    its first row), ``time_to_return_s`` (launch
    to the first row reaching ``spec.stop_at_return``; None if never), ``import_s``,
    ``final_return``, ``env_steps`` and ``wall_s``."""
    header = next(e for e in events if e["kind"] == "header")
    rows = [e for e in events if e["kind"] == "row"]
    if not rows:
        raise ValueError(f"{header['system']}: no rows")
    first, last = rows[0], rows[-1]
    dt = last["wall_s"] - first["wall_s"]
    if first.get("eval_s") is not None and last.get("eval_s") is not None:
        dt -= last["eval_s"] - first["eval_s"]  # training time alone where it can be told
    batch = header.get("batch") or spec.batch
    reached = None
    if spec.stop_at_return is not None:
        reached = next(
            (r["wall_s"] for r in rows if (r["eval_return"] or -1e30) >= spec.stop_at_return), None
        )
    return {
        "system": header["system"],
        "version": header["version"],
        "threads": header["threads"],
        "notes": header["notes"],
        "import_s": header["import_s"],
        "batch": batch,
        "trained_samples_per_s": (
            (last["sgd_updates"] - first["sgd_updates"]) * batch / dt if len(rows) > 1 else None
        ),
        "env_steps_per_s": (last["env_steps"] - first["env_steps"]) / dt if len(rows) > 1 else None,
        "time_to_return_s": reached,
        "final_return": last["eval_return"],
        "env_steps": last["env_steps"],
        "wall_s": next((e["wall_s"] for e in events if e["kind"] == "end"), last["wall_s"]),
    }

"""The FPGA learner module: modeled board time per SGD step beside the measured CPU time.

For each network and batch: the learner module's DQN or DDPG step on the board (*modeled (cycle
model)*: `drlhet.dse.devices.learner_cycles` at the sheet's clock; no board ran it), the testbench's
stepped count of the same step (with ``--stepped``), the flax/optax step jitted on this CPU
(*measured*, median of ``repeats`` timings of a ``lax.scan`` of ``steps`` steps) and the module's
C-simulation on this CPU (*measured*, function only: it says nothing of the board's speed).
Rows are printed and written as JSON.

Usage:
  python experiments/fpga_learner.py [--batches 16 64 256] [--stepped] [--out PATH]
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import checked_cli
import jax
import jax.numpy as jnp
from _common import run_info

from drlhet import backends
from drlhet.agents.ddpg import DDPGConfig, make_ddpg
from drlhet.agents.dqn import DQNConfig, make_dqn
from drlhet.backends.learner_spec import MAX_BATCH
from drlhet.dse.devices import learner_cycles, load_sheets
from drlhet.dse.devices.learner_testbench import build, stepped_cycles, stepped_ddpg_cycles

MODELED, MEASURED = "modeled (cycle model)", "measured"
NETWORKS = {  # name -> (algo, obs_dim, hidden, outputs: DQN's actions, DDPG's action dims)
    "8-64-4 (the authors' DQN)": ("dqn", 8, (64,), 4),
    "4-64x64-2 (CartPole DQN)": ("dqn", 4, (64, 64), 2),
    "4-256x256-2": ("dqn", 4, (256, 256), 2),
    "16-256x256x256-6": ("dqn", 16, (256, 256, 256), 6),
    "DDPG 8-32-4 / 12-32-1 (the authors')": ("ddpg", 8, (32,), 4),
    "DDPG 3-64x64-1 (Pendulum)": ("ddpg", 3, (64, 64), 1),
    "DDPG 3-256x256-1 (Pendulum)": ("ddpg", 3, (256, 256), 1),
}


@dataclasses.dataclass
class Args:
    board: str = "u250"
    batches: tuple[int, ...] = (16, 64, 256)
    steps: int = 200
    """SGD steps per timing (one jitted scan)."""
    repeats: int = 5
    stepped: bool = False
    """Also run the testbench's stepped count (needs g++)."""
    out: Path = Path("results/fpga_learner.json")


def _seconds_per_step(update, state, batch, weights, steps: int, repeats: int) -> float:
    """Median seconds per step of ``update`` over a jitted scan of ``steps`` steps."""
    key = jax.random.key(0)

    @jax.jit
    def many(s):
        def body(s, _):
            return update(s, batch, weights, key)[0], None

        return jax.lax.scan(body, s, None, length=steps)[0]

    jax.block_until_ready(many(state))  # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(many(state))
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


def _batch(b: int, d: int, a: int, algo: str):
    ks = jax.random.split(jax.random.key(1), 5)
    if algo == "dqn":
        action = jax.random.randint(ks[1], (b,), 0, a)
    else:
        action = jax.random.uniform(ks[1], (b, a), minval=-1.0, maxval=1.0)
    data = {
        "obs": jax.random.normal(ks[0], (b, d)),
        "action": action,
        "reward": jax.random.normal(ks[2], (b,)),
        "discount": jnp.full((b,), 0.99),
        "next_obs": jax.random.normal(ks[3], (b, d)),
    }
    return data, jnp.ones((b,))


def _agent(algo: str, obs_dim: int, hidden: tuple, outputs: int, b: int):
    """(the JAX agent, the module's) for this network, and the module's cycles per step."""
    wrap = backends.learner_step("fpga")
    config: DQNConfig | DDPGConfig
    if algo == "dqn":
        config = DQNConfig(hidden=hidden)
        agent = make_dqn(config, (obs_dim,), outputs)
        cycles: float = learner_cycles.dqn_step_cycles(obs_dim, hidden, outputs, b)
    else:
        config = DDPGConfig(hidden=hidden)
        agent = make_ddpg(config, (obs_dim,), outputs, -1.0, 1.0)
        cycles = learner_cycles.ddpg_mean_step_cycles(obs_dim, hidden, outputs, b)
    sim = wrap(algo, config, agent, (obs_dim,), outputs, b, bounds=(-1.0, 1.0))
    return agent, sim, cycles


def _stepped(exe: Path, algo: str, obs_dim: int, hidden: tuple, outputs: int, b: int) -> int:
    if algo == "dqn":
        return stepped_cycles(exe, obs_dim, hidden, outputs, b)[0]
    return stepped_ddpg_cycles(exe, obs_dim, hidden, outputs, b)[0]


def row(args: Args, name: str, net: tuple, b: int, clock: float, exe: Path | None) -> dict:
    algo, obs_dim, hidden, outputs = net
    agent, sim, cycles = _agent(algo, obs_dim, hidden, outputs, b)
    state = agent.init(jax.random.key(0))
    data, weights = _batch(b, obs_dim, outputs, algo)
    out = {
        "algo": algo,
        "network": name,
        "batch": b,
        "board": args.board,
        "board_cycles": cycles,
        "board_us": learner_cycles.seconds(cycles, clock) * 1e6,
        "board_basis": MODELED,
        "cpu_us": 1e6
        * _seconds_per_step(agent.update, state, data, weights, args.steps, args.repeats),
        "cpu_basis": f"{MEASURED} (flax/optax jitted, {os.cpu_count()}-core {platform.machine()})",
        "csim_us": 1e6
        * _seconds_per_step(sim.update, state, data, weights, args.steps, args.repeats),
        "csim_basis": f"{MEASURED} (C-simulation: function, not the board's speed)",
    }
    if exe is not None:
        out["stepped_cycles"] = _stepped(exe, algo, obs_dim, hidden, outputs, b)
    return out


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": a board without an FPGA device sheet, or a
    batch the learner module does not train."""
    fpgas = sorted(name for name, s in load_sheets().items() if s["kind"] == "fpga")
    why = checked_cli.unknown_names("--board", [args.board], fpgas)
    big = [b for b in args.batches if b > MAX_BATCH]
    if not why and big:
        why = f"--batches must be at most {MAX_BATCH} (the learner module's batch), got {big}"
    return why


def main(args: Args) -> list[dict]:
    sheet = load_sheets()[args.board]
    clock = float(sheet["values"]["clock_mhz"]["value"])
    exe = build(Path(tempfile.mkdtemp())) if args.stepped else None
    rows = []
    print(
        f"{'network':36} {'B':>4} {args.board + ' us (modeled)':>18} {'CPU us':>9} {'C-sim us':>9}"
    )
    for name, net in NETWORKS.items():
        for b in args.batches:
            r = row(args, name, net, b, clock, exe)
            rows.append(r)
            extra = f"  stepped {r['stepped_cycles']} cycles" if exe is not None else ""
            print(
                f"{name:36} {b:>4} {r['board_us']:>18.1f} {r['cpu_us']:>9.1f} "
                f"{r['csim_us']:>9.1f}{extra}",
                flush=True,
            )
    print(
        f"DSPs of the module's arithmetic: {learner_cycles.dsps()} of the board's "
        f"{sheet['values']['dsp']['value']}"
    )
    rows = [{**r, "run": run_info("hls4ml")} for r in rows]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    return rows


LEAST = {"batches": 1, "steps": 1, "repeats": 1}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)

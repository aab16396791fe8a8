"""The cycle model of the FPGA learner module (``hls/learner``): cycles per DQN learner step.

docs/design.md section 3 ("The FPGA learner"). The module runs the step's loop nests one after
another (`hls/learner/dqn.h`): three forward passes (the online network on s, the target and,
for double Q, the online network on s'), the TD/loss pass over the rows, the backward pass
(each layer's weight gradient; the input gradient of every layer but the first; ReLU's
gradient), the global norm and the optimizer over the parameter memory, and the priorities.
Each loop is pipelined at II 1 with ``P_OUT`` neurons x ``P_BATCH`` samples per iteration; a
loop of ``T`` iterations whose accumulators recur every ``d`` iterations issues its last
iteration at

    T - 1                                       when d >= add (or no accumulator),
    floor((T - 1) / d) * add + (T - 1) mod d    otherwise (it waits for the adder),

and takes that + 1 + its pipeline depth + the loop's entry cycles. The testbench steps the same
loops iteration by iteration (``hls/learner/cycles.h``, ``learner_tb --cycles``), and the two
are checked against each other (tests/hls). The latencies (`Timing`) are those of Vitis HLS's
float32 cores at 300 MHz as an assumption, not a synthesis report: a figure from this model is
*modeled (cycle model)*; no board ran it.
"""

from __future__ import annotations

import dataclasses
import math

__all__ = [
    "P_OUT",
    "P_BATCH",
    "Timing",
    "layers",
    "loop",
    "dqn_step_cycles",
    "seconds",
    "dsps",
]

P_OUT, P_BATCH = 64, 16
"""Neurons x samples per loop iteration (hls/learner/mlp.h's kPOut, kPBatch)."""


@dataclasses.dataclass(frozen=True)
class Timing:
    """Latencies in cycles (hls/learner/cycles.h): a BRAM read, fmul, fadd, a pipelined loop's
    entry and exit, the optimizer's element pipeline."""

    mem: int = 2
    mul: int = 4
    add: int = 5
    entry: int = 2
    update: int = 60


def loop(trips: int, depth: int, t: Timing, distance: int | None = None) -> int:
    """Cycles of one pipelined loop of ``trips`` iterations whose accumulators recur every
    ``distance`` iterations (None: no accumulation across iterations)."""
    if trips <= 0:
        return 0
    last = trips - 1
    if distance is not None and distance < t.add:
        last = (last // distance) * t.add + last % distance
    return last + 1 + depth + t.entry


def layers(obs_dim: int, hidden: tuple[int, ...], heads: tuple[int, ...]) -> list[tuple[int, int]]:
    """``(in, out)`` of each dense layer in the module's order: hidden layers, then heads."""
    widths = (obs_dim, *hidden)
    body = [(widths[i], widths[i + 1]) for i in range(len(hidden))]
    return body + [(widths[-1], h) for h in heads]


def _log2(n: int) -> int:
    return max(0, math.ceil(math.log2(n)))


def _forward(fan_in: int, out: int, b: int, t: Timing) -> int:
    groups, blocks = -(-b // P_BATCH), -(-out // P_OUT)
    mac = loop(fan_in * groups, t.mem + t.mul + t.add + 1, t, distance=groups)
    return blocks * (mac + loop(groups, t.mem + t.add + 2, t))


def _input_grad(fan_in: int, out: int, b: int, t: Timing) -> int:
    groups, blocks = -(-b // P_BATCH), -(-out // P_OUT)
    return blocks * loop(fan_in * groups, t.mem + t.mul + (_log2(P_OUT) + 1) * t.add + 1, t)


def _weight_grad(fan_in: int, out: int, b: int, t: Timing) -> int:
    groups, blocks = -(-b // P_BATCH), -(-out // P_OUT)
    return groups * loop((fan_in + 1) * blocks, t.mem + t.mul + (_log2(P_BATCH) + 1) * t.add + 1, t)


def _elementwise(width: int, b: int, t: Timing) -> int:
    return loop(-(-b // P_BATCH) * -(-width // P_OUT), t.mem + t.add + 1, t)


def dqn_step_cycles(
    obs_dim: int,
    hidden: tuple[int, ...],
    actions: int,
    batch: int,
    dueling: bool = True,
    double: bool = True,
    t: Timing | None = None,
) -> int:
    """Cycles of one DQN learner step of the module (``hls/learner/dqn.h``)."""
    t = t or Timing()
    heads = (1, actions) if dueling else (actions,)
    net = layers(obs_dim, hidden, heads)
    n_hidden = len(hidden)
    c = (3 if double else 2) * sum(_forward(i, o, batch, t) for i, o in net)
    c += loop(batch, t.mem + 4 * t.add + 2 * t.mul + actions, t, distance=1)  # TD, loss, dQ
    for i, o in net[n_hidden:]:
        c += _weight_grad(i, o, batch, t) + (_input_grad(i, o, batch, t) if n_hidden else 0)
    if n_hidden and dueling:
        c += _elementwise(hidden[-1], batch, t)
    for k in range(n_hidden - 1, -1, -1):
        i, o = net[k]
        c += _elementwise(o, batch, t) + _weight_grad(i, o, batch, t)
        c += _input_grad(i, o, batch, t) if k else 0
    size = sum(i * o + o for i, o in net)
    lanes = -(-size // P_OUT)
    c += loop(lanes, t.mem + t.mul + (_log2(P_OUT) + 1) * t.add, t, distance=8)  # global norm
    c += loop(lanes, t.update, t)  # the optimizer
    c += loop(batch, t.mem + t.add + 1, t, distance=1)  # priorities, mean |td|
    return c


def seconds(cycles: int, clock_mhz: float) -> float:
    """Seconds of ``cycles`` at the module's clock."""
    return cycles / (clock_mhz * 1e6)


def dsps(dsp_per_mul: int = 3, dsp_per_add: int = 2) -> int:
    """DSP slices of the module's arithmetic: the ``P_OUT x P_BATCH`` multiply-adds, the two
    adder trees, and the optimizer's ``P_OUT`` lanes (about 4 multiplies and 4 adds each; the
    divide and square root in LUTs)."""
    macs = P_OUT * P_BATCH * (dsp_per_mul + dsp_per_add)
    trees = (P_OUT - 1 + P_BATCH - 1) * dsp_per_add
    return macs + trees + P_OUT * 4 * (dsp_per_mul + dsp_per_add)

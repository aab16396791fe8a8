"""The cycle model of the FPGA learner module (``hls/learner``): cycles per DQN or DDPG/TD3
learner step.

docs/design.md section 3 ("The FPGA learner"). The module runs the step's loop nests one after
another (`hls/learner/dqn.h`): three forward passes (the online network on s, the target and,
for double Q, the online network on s'), the TD/loss pass over the rows, the backward pass
(each layer's weight gradient; the input gradient of every layer but the first; ReLU's
gradient), the global norm and the optimizer over the parameter memory's rows
(`memory_rows`: its layers padded to blocks of ``P_OUT`` outputs), and the priorities.
A DDPG / TD3 step (`hls/learner/ddpg.h`) runs the target actor and the target critics on s',
each critic on s, the critics' backward passes and Adam steps, the actor and critic 0 on s
(the actor loss), and on the steps that train the actor, critic 0's input gradient at the
action, the actor's backward pass and its Adam step. Each loop is pipelined at II 1 with
``P_OUT`` neurons x ``P_BATCH`` samples per iteration; a loop of ``T`` iterations whose
accumulators recur every ``d`` iterations issues its last iteration at

    T - 1                                       when d >= add (or no accumulator),
    floor((T - 1) / d) * add + (T - 1) mod d    otherwise (it waits for the adder),

and takes that + 1 + its pipeline depth + the loop's entry cycles. The testbench runs one step
of the HLS code, its loops counting their iterations, and steps those loops iteration by
iteration (``hls/learner/cycles.h``, ``learner_tb --cycles``); tests/hls require this closed
form to equal that count. The latencies (`Timing`) are those of Vitis HLS's
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
    "memory_rows",
    "memory_load_cycles",
    "loop",
    "dqn_step_cycles",
    "ddpg_step_cycles",
    "ddpg_mean_step_cycles",
    "seconds",
    "dsps",
]

P_OUT, P_BATCH = 64, 16
"""Neurons x samples per loop iteration (hls/learner/memory.h's kPOut, kPBatch)."""


@dataclasses.dataclass(frozen=True)
class Timing:
    """Latencies in cycles (hls/learner/cycles.h): a BRAM read, fmul, fadd, a pipelined loop's
    entry and exit, the optimizer's element pipeline."""

    mem: int = 2
    mul: int = 4
    add: int = 5
    entry: int = 2
    update: int = 60
    axi: int = 64
    """An AXI read's latency (Vitis' default m_axi latency): the load's and store's loops."""
    beats: int = 4
    """Cycles a row of ``P_OUT`` floats takes over a 512-bit AXI port (16 floats a beat)."""


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


def _forward_net(net: list[tuple[int, int]], b: int, t: Timing) -> int:
    return sum(_forward(i, o, b, t) for i, o in net)


def _backward_net(
    net: list[tuple[int, int]], n_heads: int, b: int, t: Timing, weights: bool, dx_cols: int = 0
) -> int:
    """A backward pass (hls/learner/net.h): weight gradients when ``weights``, the input
    gradient of every hidden layer but the first, the first layer's over ``dx_cols`` inputs,
    ReLU's gradient, the sum where two heads meet (or, with no hidden layer, the heads' input
    gradient written out)."""
    n_hidden = len(net) - n_heads
    c = 0
    for i, o in net[n_hidden:]:
        c += _weight_grad(i, o, b, t) if weights else 0
        c += _input_grad(i, o, b, t) if n_hidden else 0
        c += _input_grad(dx_cols, o, b, t) if not n_hidden and dx_cols else 0
    if n_hidden and n_heads == 2:  # the heads' input gradients summed
        c += _elementwise(net[n_hidden][0], b, t)
    elif not n_hidden and dx_cols:  # the heads' input gradient (summed) written to dx
        c += _elementwise(dx_cols, b, t)
    for k in range(n_hidden - 1, -1, -1):
        i, o = net[k]
        c += _elementwise(o, b, t) + (_weight_grad(i, o, b, t) if weights else 0)
        c += _input_grad(i, o, b, t) if k else (_input_grad(dx_cols, o, b, t) if dx_cols else 0)
    return c


def memory_rows(net: list[tuple[int, int]]) -> int:
    """Rows of ``P_OUT`` floats in the module's parameter memory for ``net``
    (``hls/learner/memory.h``): each layer's kernel, one row per input and block of ``P_OUT``
    outputs, then its bias, one row per block."""
    return sum((i + 1) * -(-o // P_OUT) for i, o in net)


def memory_load_cycles(nets: list[list[tuple[int, int]]], t: Timing | None = None) -> int:
    """Cycles of the top's load (or, alike, its store) of one parameter memory of each network
    in ``nets`` (list a network once per memory: DQN's parameters, target and Adam's two
    moments are four): per layer, one pipelined loop over its rows (``hls/learner/memory.h``'s
    ``PackParams``), a row's ``P_OUT`` floats ``beats`` cycles over AXI, after the AXI read's
    latency. Not a step's cost: the board driver's that loads and stores every step
    (`drlhet.dse.devices.fpga.driver_seconds`)."""
    t = t or Timing()
    c = 0
    for net in nets:
        for layer in net:
            c += (memory_rows([layer]) - 1) * t.beats + 1 + t.axi + t.entry
    return c


def _optimizer(net: list[tuple[int, int]], t: Timing, clip: bool) -> int:
    """The optimizer's element pipeline over the parameter memory, a row an iteration, after
    the global norm's pass when the step clips."""
    rows = memory_rows(net)
    c = loop(rows, t.update, t)
    if clip:
        c += loop(rows, t.mem + t.mul + (_log2(P_OUT) + 1) * t.add, t, distance=8)
    return c


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
    c = (3 if double else 2) * _forward_net(net, batch, t)
    # TD, loss, dQ: the argmax's compares and a dueling head's in-order advantages' sum deep
    mean = actions * t.add if dueling else 0
    c += loop(batch, t.mem + 4 * t.add + 2 * t.mul + actions + mean, t, distance=1)
    c += _backward_net(net, len(heads), batch, t, weights=True)
    c += _optimizer(net, t, clip=True)
    c += loop(batch, t.mem + t.add + 1, t, distance=1)  # priorities, mean |td|
    return c


def ddpg_step_cycles(
    obs_dim: int,
    hidden: tuple[int, ...],
    actions: int,
    batch: int,
    critics: int = 1,
    actor: bool = True,
    t: Timing | None = None,
) -> int:
    """Cycles of one DDPG / TD3 learner step of the module (``hls/learner/ddpg.h``):
    ``critics`` critics (2 for TD3); ``actor``: a step that trains the actor and the targets
    (every step for DDPG, one in ``policy_delay`` for TD3)."""
    t = t or Timing()
    pi = layers(obs_dim, hidden, (actions,))
    q = layers(obs_dim + actions, hidden, (1,))
    row = t.mem + t.add + 1
    column = _elementwise(1, batch, t)  # a pass over one column: q' (min), dq's seed
    c = _forward_net(pi, batch, t) + _elementwise(actions, batch, t)  # a' (noise, clip)
    c += 3 * _elementwise(obs_dim + actions, batch, t)  # the critics' inputs [s' | a'], [s | a]...
    c += 2 * critics * _forward_net(q, batch, t)  # the target critics on s', the critics on s
    c += critics * column  # q' = the target critics' minimum
    c += loop(critics * batch, t.mem + 3 * t.add + 2 * t.mul, t, distance=1)  # TD, loss
    c += critics * (column + _backward_net(q, 1, batch, t, weights=True))
    c += critics * _optimizer(q, t, clip=False)
    c += _forward_net(pi, batch, t) + _elementwise(actions, batch, t)  # actor(s)
    c += _forward_net(q, batch, t) + loop(batch, row, t, distance=1)  # ...[s | actor(s)]; loss
    if actor:
        c += column + _backward_net(q, 1, batch, t, weights=False, dx_cols=actions)
        c += _elementwise(actions, batch, t)  # through tanh
        c += _backward_net(pi, 1, batch, t, weights=True) + _optimizer(pi, t, clip=False)
    return c + loop(batch, row, t, distance=1)  # priorities, mean |td|


def ddpg_mean_step_cycles(
    obs_dim: int,
    hidden: tuple[int, ...],
    actions: int,
    batch: int,
    td3: bool = False,
    policy_delay: int = 2,
    t: Timing | None = None,
) -> float:
    """Mean cycles per learner step: DDPG trains the actor every step; TD3 (two critics) one
    step in ``policy_delay``."""
    critics, delay = (2, policy_delay) if td3 else (1, 1)
    full = ddpg_step_cycles(obs_dim, hidden, actions, batch, critics, True, t)
    light = ddpg_step_cycles(obs_dim, hidden, actions, batch, critics, False, t)
    return (full + (delay - 1) * light) / delay


def seconds(cycles: float, clock_mhz: float) -> float:
    """Seconds of ``cycles`` at the module's clock."""
    return cycles / (clock_mhz * 1e6)


def dsps(dsp_per_mul: int = 3, dsp_per_add: int = 2) -> int:
    """DSP slices of the module's arithmetic: the ``P_OUT x P_BATCH`` multiply-adds, the two
    adder trees, and the optimizer's ``P_OUT`` lanes (about 4 multiplies and 4 adds each; the
    divide and square root in LUTs)."""
    macs = P_OUT * P_BATCH * (dsp_per_mul + dsp_per_add)
    trees = (P_OUT - 1 + P_BATCH - 1) * dsp_per_add
    return macs + trees + P_OUT * 4 * (dsp_per_mul + dsp_per_add)

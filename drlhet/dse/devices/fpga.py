"""Analytical cost of the loop's primitives on an FPGA board, from its sheet and the HLS design.

docs/design.md sections 3 and 5: the replay module's commands cost what its cycle model
(`drlhet.dse.devices.rmm_cycles`, derived from ``hls/rmm``) says at the board's clock, with its
leaves on chip or, beyond the on-chip memory, in DDR; a prediction resting on it is labelled
*modeled (cycle model)*. The learner module's DQN or DDPG/TD3 step costs what its cycle model
(`drlhet.dse.devices.learner_cycles`, derived from ``hls/learner``) says at the board's clock,
also *modeled (cycle model)*; a network or algorithm the module does not run cannot be placed
there. The host pays the sheet's ``invocation_us`` per call.

The learner's step on a board is costed as the driver that exists runs it
(`drlhet.backends.fpga_learner_board`): it loads the module's memories (parameters, target
network, Adam's moments), steps and stores them back, three invocations, the memories over
the board's link each way and the module's loops that pack them into its banked rows and back
a step (`driver_seconds`). A sheet whose
``learner_memories_resident`` value is 1 costs instead a driver that keeps them on the board
(one invocation a step, the design the module's cycle model describes; no such driver exists).
"""

from __future__ import annotations

from drlhet.backends.learner_spec import memory_words, why_not
from drlhet.backends.rmm_spec import DDR, accepts, memory_bytes
from drlhet.dse.devices import learner_cycles, rmm_cycles
from drlhet.dse.devices.links import link_seconds
from drlhet.dse.shapes import Shapes

__all__ = [
    "seconds",
    "host_overhead",
    "infeasible",
    "leaves_at",
    "source",
    "learner_why_not",
    "driver_seconds",
    "board_memory",
]


def learner_why_not(s: Shapes) -> str:
    """Why the learner module cannot run this step (empty: it can)."""
    if len(s.net) < 2:
        return "the network's sizes are unknown"
    return why_not(s.algo, s.net[1:-1], s.net[:1], s.net[-1], s.batch)


def _v(sheet: dict, name: str) -> float:
    return float(sheet["values"][name]["value"])


def board_memory(sheet: dict) -> tuple[float, float, int | None]:
    """``(on-chip bytes, DDR bytes, URAM blocks or None)`` of the board of ``sheet``,
    `rmm_cycles.placement`'s last three arguments: the replay module's memories are counted in
    the sheet's ``uram_blocks`` as the code lays them out, else in bytes of ``sram_mb``."""
    uram = int(_v(sheet, "uram_blocks")) if "uram_blocks" in sheet["values"] else None
    return _v(sheet, "sram_mb") * 1e6, _v(sheet, "ddr_gb") * 1e9, uram


def leaves_at(sheet: dict, s: Shapes) -> str:
    """Where the replay module keeps its leaves on this board (`rmm_cycles.placement`)."""
    return rmm_cycles.placement(s.capacity, s.branching, *board_memory(sheet))


def seconds(prim: str, sheet: dict, s: Shapes, link: dict) -> float:
    """Seconds of one call of primitive ``prim`` (``insert``, ``sample``, ``update``,
    ``train``) on the board of ``sheet`` (hanging on the link of sheet ``link``): the replay
    module's commands from its cycle model (an insert writes E leaves, an update B; a sample
    draws B and reads its B rows from the board's DDR), the learner's step from the learner
    module's cycle model plus what its driver adds (`driver_seconds`)."""
    clock = _v(sheet, "clock_mhz")
    ddr = _v(sheet, "ddr_bw_gbs") * 1e9
    if prim in ("insert", "sample", "update"):
        n = s.num_envs if prim == "insert" else s.batch
        op = "sample" if prim == "sample" else "write"
        leaves = leaves_at(sheet, s)
        t = rmm_cycles.seconds(op, s.branching, s.capacity, n, clock, leaves=leaves)
        return t + (0.0 if prim == "update" else n * s.row_bytes / ddr)
    if prim == "train":
        obs_dim, *hidden, outputs = s.net
        if s.algo == "ddpg":
            cycles: float = learner_cycles.ddpg_mean_step_cycles(
                obs_dim, tuple(hidden), outputs, s.batch, s.td3, s.policy_delay
            )
        else:
            cycles = learner_cycles.dqn_step_cycles(
                obs_dim, tuple(hidden), outputs, s.batch, s.dueling, s.double
            )
        return learner_cycles.seconds(cycles, clock) + driver_seconds(sheet, link, s)
    raise ValueError(f"{prim} does not run on an FPGA in this model")


def driver_seconds(sheet: dict, link: dict, s: Shapes) -> float:
    """Seconds a learner step's driver adds on the board of ``sheet`` beyond the module's
    cycles and the stage's one invocation (`host_overhead`): the existing driver's load and
    store, two more invocations, the memories (``memory_words`` floats) over ``link`` each way
    and the module's loops that pack them into its banks and back
    (`learner_cycles.memory_load_cycles`); 0 where the sheet says the memories stay on the
    board (``learner_memories_resident`` 1)."""
    if sheet["values"].get("learner_memories_resident", {}).get("value", 0):
        return 0.0
    obs, *hidden, outputs = s.net
    critics = 2 if s.td3 else 1
    words = memory_words(s.algo, obs, hidden, outputs, s.dueling, critics)
    if s.algo == "ddpg":
        actor = learner_cycles.layers(obs, tuple(hidden), (outputs,))
        critic = learner_cycles.layers(obs + outputs, tuple(hidden), (1,))
        nets = 4 * [actor] + 4 * critics * [critic]
    else:
        heads = (1, outputs) if s.dueling else (outputs,)
        nets = 4 * [learner_cycles.layers(obs, tuple(hidden), heads)]
    pack = learner_cycles.memory_load_cycles(nets) / (_v(sheet, "clock_mhz") * 1e6)
    return 2 * (host_overhead(sheet) + link_seconds(link, 4 * words) + pack)


def source(group: str) -> str:
    """What the costs of ``group`` on a board rest on: the modules' cycle models."""
    del group  # the replay and the learner module each have one
    return "cycle model"


def host_overhead(sheet: dict) -> float:
    """Seconds of the host thread per call of a stage on the board (its invocation)."""
    return _v(sheet, "invocation_us") * 1e-6


def infeasible(group: str, sheet: dict, s: Shapes) -> str:
    """Why ``group`` cannot run on this board (empty: it can): the replay module is built for
    some K and at most 2^30 leaves, its memories must fit on chip or (the leaves) in DDR, and
    the transitions it samples must fit in DDR (beside the leaves there); the learner module
    runs DQN's and DDPG/TD3's steps on networks and batches within its sizes."""
    if group == "learner":
        need, have = learner_cycles.dsps(), _v(sheet, "dsp")
        if need > have:
            return f"{sheet['name']}: the learner module needs {need} DSPs, it has {have:.0f}"
        return learner_why_not(s)
    if group != "replay":
        return ""
    why = accepts(s.capacity, s.branching)
    if why:
        return why
    try:
        leaves = leaves_at(sheet, s)
    except ValueError as e:
        return f"{sheet['name']}: {e}"
    rows, ddr = s.capacity * s.row_bytes, _v(sheet, "ddr_gb") * 1e9
    leaf_bytes = memory_bytes(s.capacity, s.branching)[0] if leaves == DDR else 0
    if rows + leaf_bytes <= ddr:
        return ""
    return (
        f"{sheet['name']}: capacity {s.capacity}: its transitions ({rows / 1e9:,.1f} GB)"
        + (f" and leaves ({leaf_bytes / 1e9:,.1f} GB)" if leaf_bytes else "")
        + f" exceed the board's DDR ({ddr / 1e9:,.0f} GB)"
    )

"""The pipelined loop: one host thread per device, bounded channels between the stages.

docs/design.md section 6; Zhang, Meng, Prasanna, TPDS 2023, Sec. 5. With priority-update delay
``k >= sgd_steps`` the stages (`drlhet.runtime.stages.pipeline_stages`, U iterations and
``P = U * sgd_steps`` learner steps per call) of each device run on their own thread:

* every device a CPU device: one program per device and chunk, its stage calls linked to the
  other device's by in-program channels (`drlhet.runtime.channel_stages`): no Python runs
  between stage calls;
* otherwise (an accelerator; or inside `host_driven`): the threads call the stages
  (`drlhet.runtime.stage_loops`), so a stage that blocks its caller (an FPGA call) holds up
  only its own device; every payload is one packed word array (`drlhet.runtime.payload`) put
  to the consumer's device on the producer's thread.

Both compute the same numbers (tested bit for bit). The channels' depths follow from k: the
replay runs at most ``ceil(k / P)`` calls ahead of the learner, the actors two. The first error
of any thread (or of the host thread that evaluates and reports) stops every thread and is
raised once they all ended.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from drlhet.backends import channel
from drlhet.runtime.channel_stages import (
    Links,
    group_thread,
    in_program_groups,
    open_links,
    skewed,
)
from drlhet.runtime.chunks import check_replay_error, chunk_row, host_summary
from drlhet.runtime.compiling import jit
from drlhet.runtime.host_loop import LoopState, final_state, place_state
from drlhet.runtime.saving import ChunkHook
from drlhet.runtime.stage_loops import StageRun, group_loop
from drlhet.runtime.stages import PipelineStages, pipeline_stages, unroll_of
from drlhet.runtime.threads import ChunkEnd, Clock, Crew
from drlhet.runtime.trainer import Trainer, TrainState
from drlhet.runtime.update_fifo import UpdateFifo

__all__ = ["run_pipeline", "device_groups", "host_driven"]

_GROUPS = ("actors", "replay", "learner")
_FORCE_HOST_CHANNELS = False
"""Set by `host_driven`: the host-driven loops run where in-program channels would."""


@contextlib.contextmanager
def host_driven() -> Iterator[None]:
    """Within it, split mappings of CPU devices run the host-driven loops instead of in-program
    channels: to profile those loops' host costs on a CPU (they are the path of a mapping with
    an accelerator, `drlhet.dse.profile_pipeline`) and to compare the two paths (tests)."""
    global _FORCE_HOST_CHANNELS
    before, _FORCE_HOST_CHANNELS = _FORCE_HOST_CHANNELS, True
    try:
        yield
    finally:
        _FORCE_HOST_CHANNELS = before


def run_pipeline(
    tr: Trainer,
    states: TrainState,
    devices: dict[str, jax.Device],
    t0: float,
    hook: ChunkHook,
    extra: dict | None = None,
    first: int = 0,
) -> tuple[TrainState, list[dict]]:
    """Runs ``tr`` (``delay >= sgd_steps``) with each group's stage loop on its own thread:
    ``tr.chunks`` chunks, numbered from ``first`` in the rows (`drlhet.runtime.run` runs the
    pipeline in segments that end at checkpoints; the state is out only when its threads end,
    so ``hook.after`` gets no state getter).

    Same arguments, rows and final state as `drlhet.runtime.host_loop.run_iteration_loop`;
    rows add ``iterations_per_stage_call`` (U), ``host_threads`` (one per device group),
    ``channels`` (``"in-program"``: every device a CPU device; ``"host"``: the threads call the
    stages) and ``threads``: per thread (named by its stages, ``actors+replay``), ms per call of
    ``run`` (wall) and ``wait`` (blocked on a channel) with in-program channels; else of
    ``dispatch`` (and ``dispatch_<stage>`` of each stage or merged program), ``transfer``,
    ``wait`` and ``sync`` (waiting for its own device) (`drlhet.runtime.threads.Clock`); and
    ``calls``.

    Raises:
      the first error of any stage thread (with a note naming the stage), of the evaluation or
      of ``on_chunk``, after every stage thread has ended.
    """
    cfg = tr.config
    groups = device_groups(devices)
    example = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), states)
    st = pipeline_stages(cfg, tr, unroll_of(cfg, tr.iterations), example)
    loop = place_state(cfg, states, devices)
    lead = -(-cfg.delay // (st.unroll * cfg.sgd_steps))
    names = ["+".join(g) for g in groups]
    in_program = (
        channel.available(devices.values())
        and in_program_groups(groups) is not None
        and not _FORCE_HOST_CHANNELS
    )
    crew = Crew()
    ch = {"reports": crew.channel((len(_GROUPS) + len(names)) * tr.chunks)}
    agent_words = jit(jax.vmap(st.agent.pack))(loop.agent)
    # the host thread evaluates while the stages run: compile it now, not in chunk 1
    k_eval = jax.ShapeDtypeStruct(
        loop.env[4].shape, loop.env[4].dtype, sharding=agent_words.sharding
    )
    evaluate: Any = st.evaluate  # a jitted function
    st = st._replace(evaluate=evaluate.lower(agent_words, k_eval).compile())
    r = StageRun(tr, st, loop, ch, tr.iterations // st.unroll, ChunkEnd(tr.chunks))
    if in_program and any(skewed(r, n) for n in names):  # programs for the last chunk
        r.end = ChunkEnd(tr.chunks, margin=2)
    links = open_links(r, lead) if in_program else None
    extra = {
        **(extra or {}),
        "iterations_per_stage_call": st.unroll,
        "host_threads": len(names),
        "channels": "in-program" if in_program else "host",
    }
    try:  # from the first thread started: an error (or Ctrl-C) anywhere stops every thread
        if links is not None:
            crew.on_halt(links.close)
        try:
            t_start = time.perf_counter()
            _start_threads(r, crew, groups, links, lead, agent_words)
            rows = _report(r, names, t0, t_start, hook, extra, first)
        except BaseException:
            crew.halt()  # closes the channels: a program waiting on one fails, its thread ends
            crew.join()  # a stage's error, if one came first, wins over the host's
            raise
        crew.join()
        return _finish(cfg, st, loop, crew, ch, links), rows
    finally:
        if links is not None:
            links.destroy()


def _start_threads(r: StageRun, crew: Crew, groups, links: Links | None, lead, agent_words):
    """Starts one thread per device group: its chunk programs, or its stage loops."""
    if links is not None:
        for n in ["+".join(g) for g in groups]:
            crew.start(n, functools.partial(group_thread, r, links, n, agent_words))
    else:
        _host_channels(r, crew, lead, agent_words)
        for g in groups:
            crew.start("+".join(g), functools.partial(group_loop, r, g, agent_words, Clock()))


def _host_channels(r: StageRun, crew: Crew, lead: int, agent_words: Any) -> None:
    """The host-driven loops' channels, seeded: the actors' first two agents."""
    r.ch.update(
        params=crew.channel(3),
        transitions=crew.channel(3),
        batches=crew.channel(lead + 1),
        updates=crew.channel(lead + 2),
    )
    loop = r.loop
    r.ch["params"].put(jit(jax.vmap(r.st.agent.pack))(loop.actor_agent))  # actors call 0
    r.ch["params"].put(loop.move("learner", "actors")(agent_words))  # call 1


def device_groups(devices: dict[str, jax.Device]) -> list[tuple[str, ...]]:
    """The stage groups that share a device, in `GROUPS` order, e.g. ``[("actors",
    "replay"), ("learner",)]``: one thread each.

    Raises:
      ValueError: every group on one device (the fused loop runs that mapping).
    """
    by_device: dict[jax.Device, list[str]] = {}
    for g in _GROUPS:
        by_device.setdefault(devices[g], []).append(g)
    if len(by_device) == 1:
        raise ValueError("the pipelined loop needs a mapping split across devices")
    return [tuple(g) for g in by_device.values()]


def _report(r: StageRun, names: list[str], t0, t_start, hook, extra, first) -> list[dict]:
    """The host thread: per chunk, waits for every stage's and thread's report, evaluates the
    learner's agent on the actors' key, checks the buffer's flags and makes the row. Once the
    hook asks to stop (checked at each row and every 50 ms while it waits for one), ends the
    threads' chunks early (`ChunkEnd.ask`; the chunk whose row it waits for still runs) and
    holds the last row for the hook to save with the state."""
    cfg, tr, rows, got, last = r.tr.config, r.tr, [], {}, t_start
    tags = [*_GROUPS, *(f"clock:{n}" for n in names)]
    i = 0

    def stop_if_asked() -> None:  # not at the next row: a chunk may take minutes
        if hook.stopping(first + i):
            r.end.ask(at_least=i + 1)

    while i < r.end.chunks:
        while not all((t, i) in got for t in tags):
            tag, chunk, payload = r.ch["reports"].get(idle=stop_if_asked)
            got[(tag, chunk)] = payload
        finished, k_eval, steps = got.pop(("actors", i))
        agent, metrics, done_at = got.pop(("learner", i))
        error = got.pop(("replay", i))
        threads = {n: got.pop((f"clock:{n}", i)) for n in names}
        summary = host_summary(cfg, metrics, finished, r.st.evaluate(agent, k_eval), steps)
        check_replay_error(error, first + i, summary, cfg)
        row = chunk_row(cfg, tr.iterations, summary, first + i, t0, last, done_at)
        rows.append({**row, **extra, "threads": threads})
        last = done_at  # timed by the learner's thread: the host thread may lag behind
        stop_if_asked()  # (asked while it waited: the same count, every thread is past i)
        hook.after(rows[-1], None, last=r.end.chunks < tr.chunks and i == r.end.chunks - 1)
        i += 1
    return rows


def _finish(cfg, st: PipelineStages, loop: LoopState, crew: Crew, ch: dict, links: Links | None):
    """The final `TrainState` from the threads' results and what is left in the channels: the
    actors' next agent and the k updates not applied yet."""
    results: dict[str, Any] = {}
    for one in crew.results.values():
        results.update(one)
    loop.env, loop.env_steps = results["actors"]
    loop.rep, fifo = results["replay"]
    loop.agent = jit(jax.vmap(st.agent.unpack))(results["learner"])
    if links is not None:  # per-step messages [S, We] on the host
        left = links.updates.drain()
        fifo = UpdateFifo(np.stack(left, axis=1)) if left else None
        next_agent = links.params.drain()[0]
    else:
        for updates in ch["updates"].drain():
            fifo.push(updates)
        next_agent = ch["params"].drain()[0]
    agent_dev = jax.device_put(next_agent, loop.devices["actors"])
    loop.actor_agent = jit(jax.vmap(st.agent.unpack))(agent_dev)
    if fifo is None:
        return final_state(cfg, loop, [])
    pending: Any = jit(jax.vmap(jax.vmap(st.entry.unpack)))(fifo.take(len(fifo)))
    return final_state(cfg, loop, [pending])

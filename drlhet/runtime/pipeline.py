"""The pipelined host loop: one host thread per device group, bounded channels between them.

docs/design.md section 6; Zhang, Meng, Prasanna, TPDS 2023, Sec. 5. With priority-update delay
``k >= sgd_steps`` the actors, the replay and the learner each run their stage loop
(`drlhet.runtime.stages.pipeline_stages`, U iterations and ``P = U * sgd_steps`` learner steps
per call) on their own thread, so a stage that blocks its caller (an XLA CPU program that runs
inline, an FPGA call) holds up only its own group:

* actors call c acts with the agent learner call ``c - 2`` produced and sends its transitions
  to the replay;
* replay call c inserts them, samples P batches and applies, after each sample, the update of
  k learner steps earlier (`UpdateFifo`, seeded with k empty updates), then sends the batches;
* learner call c trains on them and sends the P priority updates to the replay and the new agent
  to the actors.

Every payload is one packed word array (`drlhet.runtime.payload`), put to the consumer's device
on the producer's thread right after the producing call is dispatched (a put does not wait for
its producer), so a consumer only waits where the data dependency says so. The channels' depths
follow from k: the replay runs at most ``ceil(k / P)`` calls ahead of the learner, the actors two.
The first error of any thread (or of the host thread that evaluates and reports) stops every
thread and is raised once they all ended.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from drlhet.runtime.chunks import check_replay_error, chunk_row, host_summary, split_keys
from drlhet.runtime.host_loop import LoopState, final_state, place_state
from drlhet.runtime.stages import PipelineStages, pipeline_stages, unroll_of
from drlhet.runtime.threads import Channel, Clock, Crew
from drlhet.runtime.trainer import Trainer, TrainState
from drlhet.runtime.update_fifo import UpdateFifo

__all__ = ["run_pipeline"]

_GROUPS = ("actors", "replay", "learner")


def run_pipeline(
    tr: Trainer,
    states: TrainState,
    devices: dict[str, jax.Device],
    t0: float,
    on_chunk: Callable[[dict], None] | None = None,
    extra: dict | None = None,
) -> tuple[TrainState, list[dict]]:
    """Runs ``tr`` (``delay >= sgd_steps``) with each group's stage loop on its own thread.

    Same arguments, rows and final state as `drlhet.runtime.host_loop.run_iteration_loop`;
    rows add ``iterations_per_stage_call`` (U), ``host_threads`` (3) and ``threads``: per group,
    ms per stage call of ``dispatch``, ``transfer``, ``wait`` (blocked on a channel) and ``sync``
    (waiting for its own device), and ``calls`` (`drlhet.runtime.threads.Clock`).

    Raises:
      the first error of any stage thread (with a note naming the stage), of the evaluation or
      of ``on_chunk``, after every stage thread has ended.
    """
    cfg = tr.config
    example = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), states)
    st = pipeline_stages(cfg, tr, unroll_of(cfg, tr.iterations), example)
    loop = place_state(cfg, states, devices)
    per_call = st.unroll * cfg.sgd_steps
    lead = -(-cfg.delay // per_call)
    crew = Crew()
    ch = {
        "params": crew.channel(3),
        "transitions": crew.channel(3),
        "batches": crew.channel(lead + 1),
        "updates": crew.channel(lead + 2),
        "reports": crew.channel(len(_GROUPS) * tr.chunks),
    }
    pack = jax.jit(jax.vmap(st.agent.pack))
    ch["params"].put(pack(loop.actor_agent))  # actors call 0: the state's actor agent
    agent_words = pack(loop.agent)
    ch["params"].put(loop.move("learner", "actors")(agent_words))  # call 1
    calls = tr.iterations // st.unroll
    # the host thread evaluates while the stages run: compile it now, not in chunk 1
    k_eval = jax.ShapeDtypeStruct(
        loop.env[4].shape, loop.env[4].dtype, sharding=agent_words.sharding
    )
    evaluate: Any = st.evaluate  # a jitted function
    st = st._replace(evaluate=evaluate.lower(agent_words, k_eval).compile())
    t_start = time.perf_counter()
    crew.start("actors", lambda: _actors(tr, st, loop, ch, calls))
    crew.start("replay", lambda: _replay(tr, st, loop, ch, calls))
    crew.start("learner", lambda: _learner(tr, st, agent_words, loop, ch, calls))
    extra = {**(extra or {}), "iterations_per_stage_call": st.unroll, "host_threads": 3}
    try:
        rows = _report(tr, st, ch["reports"], t0, t_start, on_chunk, extra)
    except BaseException:
        crew.stop.set()
        crew.join()  # a stage's error, if one came first, wins over the host's
        raise
    crew.join()
    return _finish(cfg, st, loop, crew, ch), rows


class _InFlight:
    """At most ``depth`` calls of one thread dispatched and not finished: JAX's dispatch is
    asynchronous, so without this bound a thread would queue the whole run's calls at once
    (memory grows, and the chunk rows would time dispatch instead of work)."""

    def __init__(self, depth: int = 2):
        self._outputs: collections.deque = collections.deque()
        self._depth = depth

    def push(self, output: Any) -> None:
        """Records a call's output; waits for the call ``depth`` calls back to finish."""
        self._outputs.append(output)
        if len(self._outputs) > self._depth:
            jax.block_until_ready(self._outputs.popleft())


def _actors(tr: Trainer, st: PipelineStages, loop: LoopState, ch: dict[str, Channel], calls: int):
    """The actors' thread: ``calls`` calls per chunk, then the chunk's evaluation key."""
    cfg, env, steps = tr.config, list(loop.env), loop.env_steps
    to_r, to_l = loop.move("actors", "replay"), loop.move("actors", "learner")
    window, clock = _InFlight(), Clock()
    for i in range(tr.chunks):
        finished = []
        for _ in range(calls):
            agent_words = ch["params"].get()
            clock.mark("wait")
            *env, words, done = st.actor(agent_words, *env, steps)
            clock.mark("dispatch")
            window.push(words)
            clock.mark("sync")
            _send(ch["transitions"], to_r, words, clock)
            finished.append(done)
            steps += st.unroll * cfg.num_envs
        env[4], k_eval = split_keys(env[4])
        ch["reports"].put(("actors", i, (finished, to_l(k_eval), steps, clock.take())))
    return tuple(env), steps


def _send(channel: Channel, move, x, clock: Clock) -> None:
    """Puts ``x`` on the consumer's device (``move``) and in ``channel``, timed."""
    x = move(x)
    clock.mark("transfer")
    channel.put(x)
    clock.mark("wait")
    clock.call()


def _replay(tr: Trainer, st: PipelineStages, loop: LoopState, ch: dict[str, Channel], calls: int):
    """The replay's thread: insert, P samples, each followed by the update of k steps back."""
    cfg, rep, steps = tr.config, loop.rep, loop.env_steps
    per_call, to_l = st.unroll * cfg.sgd_steps, loop.move("replay", "learner")
    pack = jax.jit(jax.vmap(jax.vmap(st.entry.pack)))
    empty = UpdateFifo.empty(cfg.seeds, cfg.delay, cfg.batch_size)
    fifo = UpdateFifo(pack(jax.device_put(empty, loop.devices["replay"])))
    window, clock = _InFlight(), Clock()
    for i in range(tr.chunks):
        for _ in range(calls):
            words = ch["transitions"].get()
            while len(fifo) < per_call:
                fifo.push(ch["updates"].get())
            clock.mark("wait")
            rep, batches = st.replay(rep, words, fifo.take(per_call), steps)
            clock.mark("dispatch")
            window.push(batches)
            clock.mark("sync")
            _send(ch["batches"], to_l, batches, clock)
            steps += st.unroll * cfg.num_envs
        # the next call donates rep: report a copy of the flags
        ch["reports"].put(("replay", i, (jnp.copy(rep.error), clock.take())))
    return rep, fifo


def _learner(tr, st: PipelineStages, agent, loop: LoopState, ch: dict[str, Channel], calls: int):
    """The learner's thread: P SGD steps per call on the packed agent ``agent``; updates to the
    replay, the agent to the actors."""
    to_r, to_a = loop.move("learner", "replay"), loop.move("learner", "actors")
    window, clock = _InFlight(), Clock()
    for i in range(tr.chunks):
        metrics = []
        for _ in range(calls):
            batches = ch["batches"].get()
            clock.mark("wait")
            agent, updates, m = st.learner(agent, batches)
            clock.mark("dispatch")
            window.push(agent)
            clock.mark("sync")
            updates, words = to_r(updates), to_a(agent)
            clock.mark("transfer")
            ch["updates"].put(updates)
            ch["params"].put(words)
            clock.mark("wait")
            clock.call()
            metrics.append(m)
        jax.block_until_ready(agent)  # the chunk's last learner step: its work is done
        done_at = time.perf_counter()
        ch["reports"].put(("learner", i, (agent, metrics, done_at, clock.take())))
    return agent


def _report(tr, st: PipelineStages, reports: Channel, t0, t_start, on_chunk, extra) -> list[dict]:
    """The host thread: per chunk, waits for the three groups' reports, evaluates the learner's
    agent on the actors' key, checks the buffer's flags and makes the row."""
    cfg, rows, got, last = tr.config, [], {}, t_start
    for i in range(tr.chunks):
        while not all((g, i) in got for g in _GROUPS):
            group, chunk, payload = reports.get()
            got[(group, chunk)] = payload
        finished, k_eval, steps, clocks = got.pop(("actors", i))
        agent, metrics, done_at, l_clock = got.pop(("learner", i))
        error, r_clock = got.pop(("replay", i))
        threads = {"actors": clocks, "replay": r_clock, "learner": l_clock}
        summary = host_summary(cfg, metrics, finished, st.evaluate(agent, k_eval), steps)
        check_replay_error(error)
        row = chunk_row(cfg, tr.iterations, summary, i, t0, last, done_at)
        rows.append({**row, **extra, "threads": threads})
        last = done_at  # timed by the learner's thread: the host thread may lag behind
        if on_chunk:
            on_chunk(rows[-1])
    return rows


def _finish(cfg, st: PipelineStages, loop: LoopState, crew: Crew, ch: dict[str, Channel]):
    """The final `TrainState` from the threads' results and what is left in the channels: the
    actors' next agent and the k updates not applied yet."""
    loop.env, loop.env_steps = crew.results["actors"]
    loop.rep, fifo = crew.results["replay"]
    loop.agent = jax.jit(jax.vmap(st.agent.unpack))(crew.results["learner"])
    for updates in ch["updates"].drain():
        fifo.push(updates)
    loop.actor_agent = jax.jit(jax.vmap(st.agent.unpack))(ch["params"].drain()[0])
    pending: Any = jax.jit(jax.vmap(jax.vmap(st.entry.unpack)))(fifo.take(len(fifo)))
    return final_state(cfg, loop, [pending])

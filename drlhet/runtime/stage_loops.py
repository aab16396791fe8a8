"""The stage loops of the threaded pipeline, one host thread per device group.

docs/design.md section 6; Zhang, Meng, Prasanna, TPDS 2023, Sec. 5. Each stage's loop is a
generator that dispatches one stage call per step (U iterations, `drlhet.runtime.stages`), sends
its payloads and yields; at the end of a chunk it posts its report. A thread (`group_loop`) runs
the stages of one device group:

* one stage: its loop;
* actors + replay: one program per call for both (`actor_replay`): one dispatch, and the
  transitions never leave the device (the actors' work is small);
* actors + learner, replay + learner: both loops alternately, the first one call ahead where the
  data allow it (actors call c + 1 needs learner call c - 1; replay call c + 1 needs learner
  call c + 1 - floor(k / P)). Two programs, not one: XLA runs the replay's next call beside the
  learner's current one on the host's cores (one program for both, measured on 2 cores at
  k = 16, ran at 0.84x the fused loop where two ran at 1.43x).

Call c of the actors acts with the agent of learner call ``c - 2``; replay call c applies, after
each sample, the update of k learner steps earlier (`UpdateFifo`, seeded with the state's k
pending updates).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Generator
from typing import Any

import jax
import jax.numpy as jnp

from drlhet.runtime.chunks import split_keys
from drlhet.runtime.compiling import jit
from drlhet.runtime.host_loop import LoopState
from drlhet.runtime.stages import PipelineStages
from drlhet.runtime.threads import Channel, ChunkEnd, Clock
from drlhet.runtime.trainer import Trainer
from drlhet.runtime.update_fifo import UpdateFifo

__all__ = ["StageRun", "group_loop"]

Loop = Generator[None, None, dict[str, Any]]


@dataclasses.dataclass
class StageRun:
    """What every stage loop of one run shares: the trainer, the stages, the placed state, the
    channels (``params``, ``transitions``, ``batches``, ``updates``, ``reports``), the stage
    calls per chunk and the chunks every thread runs (``end``: ``tr.chunks`` unless a stop
    lowers it; each loop goes through ``for i in r.end``)."""

    tr: Trainer
    st: PipelineStages
    loop: LoopState
    ch: dict[str, Channel]
    calls: int
    end: ChunkEnd

    @property
    def per_call(self) -> int:
        """P: learner steps per stage call."""
        return self.st.unroll * self.tr.config.sgd_steps

    @property
    def env_per_call(self) -> int:
        return self.st.unroll * self.tr.config.num_envs

    def report(self, tag: str, chunk: int, payload: Any) -> None:
        self.ch["reports"].put((tag, chunk, payload))


class _InFlight:
    """At most ``depth`` calls of one loop dispatched and not finished: JAX's dispatch is
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

    def dispatched(self, clock: Clock, stage: str, output: Any) -> None:
        """After a call of ``stage`` returned: charges its dispatch, then `push` (as sync)."""
        clock.mark("dispatch", stage)
        self.push(output)
        clock.mark("sync")


def group_loop(r: StageRun, stages: tuple[str, ...], agent_words: Any, clock: Clock) -> dict:
    """Runs the stage loops of one device group (``stages``, in `drlhet.backends.base.GROUPS`
    order) on the calling thread; posts ``("clock:" + name, chunk, clock figures)`` per chunk
    (``name``: the stages joined by ``+``).

    Returns:
      each stage's results: ``actors``: (env carry, env steps); ``replay``: (replay state,
      `UpdateFifo`); ``learner``: the packed agent.
    """
    if stages == ("actors", "replay"):
        loops = [_actors_replay(r, clock)]
    else:
        make = {
            "actors": lambda: _actors(r, clock),
            "replay": lambda: _replay(r, clock),
            "learner": lambda: _learner(r, clock, agent_words),
        }
        loops = [make[s]() for s in stages]
    results: dict[str, Any] = {}
    # replay call c needs learner call c - floor(k / P): it may run one call ahead if that is >= 2
    ahead = r.tr.config.delay // r.per_call >= 2
    if stages == ("actors", "learner") or (stages == ("replay", "learner") and ahead):
        _advance(loops[0], results)  # the first loop runs one call ahead
    for i in r.end:
        for _ in range(r.calls):
            for one in loops:
                _advance(one, results)
            clock.call()
        r.report("clock:" + "+".join(stages), i, clock.take())
    for one in loops:  # the last chunk's reports, and the results
        while _advance(one, results):
            pass
    return results


def _advance(loop: Loop, results: dict) -> bool:
    """One step of ``loop``; False (its results merged into ``results``) once it has ended."""
    try:
        next(loop)
    except StopIteration as end:
        if end.value is not None:  # None: it had ended before
            results.update(end.value)
        return False
    return True


def _send(channel: Channel, move, x, clock: Clock) -> None:
    """Puts ``x`` on the consumer's device (``move``) and in ``channel``, timed."""
    x = move(x)
    clock.mark("transfer")
    channel.put(x)
    clock.mark("wait")


def _fifo(r: StageRun) -> UpdateFifo:
    """The replay's queue of updates, seeded with the k the state holds (empty ones at the start
    of a run; packed, on its device)."""
    pack = jit(jax.vmap(jax.vmap(r.st.entry.pack)))
    return UpdateFifo(pack(r.loop.pending))


def _updates(r: StageRun, fifo: UpdateFifo) -> Any:
    """The P updates the next replay call applies, taken from the learner's channel as needed."""
    while len(fifo) < r.per_call:
        fifo.push(r.ch["updates"].get())
    return fifo.take(r.per_call)


def _actors(r: StageRun, clock: Clock) -> Loop:
    """The actors: act and step the environments U iterations per call."""
    env, steps = list(r.loop.env), r.loop.env_steps
    to_r, to_l = r.loop.move("actors", "replay"), r.loop.move("actors", "learner")
    window = _InFlight()
    for i in r.end:
        finished = []
        for _ in range(r.calls):
            agent_words = r.ch["params"].get()
            clock.mark("wait")
            *env, words, done = r.st.actor(agent_words, *env, steps)
            window.dispatched(clock, "actors", words)
            _send(r.ch["transitions"], to_r, words, clock)
            finished.append(done)
            steps += r.env_per_call
            yield
        env[4], k_eval = split_keys(env[4])
        r.report("actors", i, (finished, to_l(k_eval), steps))
    return {"actors": (tuple(env), steps)}


def _replay(r: StageRun, clock: Clock) -> Loop:
    """The replay: insert, P samples, each followed by the update of k learner steps back."""
    rep, steps, to_l = r.loop.rep, r.loop.env_steps, r.loop.move("replay", "learner")
    fifo, window = _fifo(r), _InFlight()
    for i in r.end:
        for _ in range(r.calls):
            words = r.ch["transitions"].get()
            updates = _updates(r, fifo)
            clock.mark("wait")
            rep, batches = r.st.replay(rep, words, updates, steps)
            window.dispatched(clock, "replay", batches)
            _send(r.ch["batches"], to_l, batches, clock)
            steps += r.env_per_call
            yield
        # the next call donates rep: report a copy of the flags
        r.report("replay", i, jnp.copy(rep.error))
    return {"replay": (rep, fifo)}


def _learner(r: StageRun, clock: Clock, agent: Any) -> Loop:
    """The learner: P SGD steps per call on the packed agent; updates to the replay, the agent
    to the actors."""
    to_r, to_a = r.loop.move("learner", "replay"), r.loop.move("learner", "actors")
    window = _InFlight()
    for i in r.end:
        metrics = []
        for _ in range(r.calls):
            batches = r.ch["batches"].get()
            clock.mark("wait")
            agent, updates, m = r.st.learner(agent, batches)
            window.dispatched(clock, "learner", agent)
            updates, words = to_r(updates), to_a(agent)
            clock.mark("transfer")
            r.ch["updates"].put(updates)
            r.ch["params"].put(words)
            clock.mark("wait")
            metrics.append(m)
            yield
        jax.block_until_ready(agent)  # the chunk's last learner step: its work is done
        r.report("learner", i, (agent, metrics, time.perf_counter()))
    return {"learner": agent}


def _actors_replay(r: StageRun, clock: Clock) -> Loop:
    """Actors and replay on one device: one program per call, batches to the learner."""
    env, rep, steps = list(r.loop.env), r.loop.rep, r.loop.env_steps
    to_l = r.loop.move("replay", "learner")
    fifo, window = _fifo(r), _InFlight()
    for i in r.end:
        finished = []
        for _ in range(r.calls):
            agent_words = r.ch["params"].get()
            updates = _updates(r, fifo)
            clock.mark("wait")
            *env, done, rep, batches = r.st.actor_replay(agent_words, *env, steps, rep, updates)
            window.dispatched(clock, "actors+replay", batches)
            _send(r.ch["batches"], to_l, batches, clock)
            finished.append(done)
            steps += r.env_per_call
            yield
        env[4], k_eval = split_keys(env[4])
        r.report("actors", i, (finished, to_l(k_eval), steps))
        r.report("replay", i, jnp.copy(rep.error))
    return {"actors": (tuple(env), steps), "replay": (rep, fifo)}

"""The pipeline's stages as one program per chunk, linked by in-program channels.

docs/design.md section 6; Zhang, Meng, Prasanna, TPDS 2023, Sec. 5. Where every device of a
split mapping is a CPU device, each stage (actors, replay, learner) runs as one jitted program
per chunk on its own host thread: a scan over the chunk's stage calls, each of which receives
its inputs from and sends its outputs to a `drlhet.backends.channel.NativeChannel`. No Python
runs between calls, and a stage waits only where its data are not there yet. The data flow is
the host-driven pipeline's (`drlhet.runtime.stage_loops`), message for message:

* ``params``: the learner's packed agent after each call, seeded with the actors' agent and the
  learner's: actors call c acts with the agent of learner call ``c - 2``;
* ``transitions``: actors call c -> replay call c;
* ``batches``: replay call c -> learner call c (P batches, packed);
* ``updates``: one message per learner step, seeded with k empty ones: replay call c applies
  the updates of learner steps ``cP - k .. cP + P - 1 - k`` (a delay of exactly k steps).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.backends.channel import NativeChannel
from drlhet.runtime.chunks import split_keys
from drlhet.runtime.stage_loops import StageRun
from drlhet.runtime.update_fifo import UpdateFifo

__all__ = ["Links", "open_links", "group_thread", "in_program_groups", "STAGE_INPUTS"]

STAGE_INPUTS = {
    "actors": (("params", "recv"), ("transitions", "send")),
    "replay": (("transitions", "recv"), ("updates", "recv"), ("batches", "send")),
    "learner": (("batches", "recv"), ("updates", "send"), ("params", "send")),
    "actors+replay": (("params", "recv"), ("updates", "recv"), ("batches", "send")),
}
"""Each stage's channels and which end of them it holds (for its time spent blocked)."""


class Links(NamedTuple):
    """The four channels of one run (``[S, W]`` uint32 messages; ``updates``: ``[S, We]``)."""

    params: NativeChannel
    transitions: NativeChannel
    batches: NativeChannel
    updates: NativeChannel

    def close(self) -> None:
        for ch in self:
            ch.close()

    def destroy(self) -> None:
        for ch in self:
            ch.destroy()


def open_links(r: StageRun, lead: int) -> Links:
    """Opens and seeds the channels of run ``r`` (the replay runs at most ``lead`` calls ahead
    of the learner): two agents for the actors' first calls, k empty updates."""
    st, loop, cfg = r.st, r.loop, r.tr.config
    pack = jax.jit(jax.vmap(st.agent.pack))
    first = (pack(loop.actor_agent), pack(loop.agent))
    trans = jax.eval_shape(st.actor, first[0], *loop.env, loop.env_steps)[5]
    updates = jax.ShapeDtypeStruct((cfg.seeds, r.per_call, st.entry.size), jnp.uint32)
    batches = jax.eval_shape(st.replay, loop.rep, trans, updates, loop.env_steps)[1]
    one_update = jax.ShapeDtypeStruct((cfg.seeds, st.entry.size), jnp.uint32)
    links = Links(
        params=NativeChannel(3, first[0]),
        transitions=NativeChannel(4, trans),
        batches=NativeChannel(lead + 2, batches),
        updates=NativeChannel(cfg.delay + r.per_call, one_update),
    )
    for words in first:
        links.params.put(words)
    empty = UpdateFifo.empty(cfg.seeds, cfg.delay, cfg.batch_size)
    words = np.asarray(jax.jit(jax.vmap(jax.vmap(st.entry.pack)))(empty))  # [S, k, We]
    for j in range(cfg.delay):
        links.updates.put(words[:, j])
    return links


def in_program_groups(groups: list[tuple[str, ...]]) -> list[str] | None:
    """The threads of in-program channels for these device groups, or None where a group is
    not supported (actors + learner, replay + learner on one device: they need one call of
    skew between their stages, which the host-driven loops give)."""
    names = ["+".join(g) for g in groups]
    return names if set(names) <= set(STAGE_INPUTS) else None


def _programs(r: StageRun, links: Links) -> dict[str, Any]:
    """Each stage's chunk program: ``calls`` stage calls, channels in and out."""
    st, calls, p, n = r.st, r.calls, r.per_call, r.env_per_call

    def actors(env, steps, token):
        def body(carry, _):
            env, steps, token = carry
            words = links.params.recv(token)
            *env, trans, finished = st.actor(words, *env, steps)
            return (tuple(env), steps + n, links.transitions.send(trans, token)), finished

        (env, _, token), finished = jax.lax.scan(body, (env, steps, token), None, calls)
        return env, token, finished

    def replay(rep, steps, token):
        def body(carry, _):
            rep, steps, token = carry
            trans = links.transitions.recv(token)
            updates = jnp.swapaxes(links.updates.recv(token, p), 0, 1)  # [S, P, We]
            rep, batches = st.replay(rep, trans, updates, steps)
            return (rep, steps + n, links.batches.send(batches, token)), None

        (rep, _, token), _ = jax.lax.scan(body, (rep, steps, token), None, calls)
        return rep, token

    def learner(agent, token):
        def body(carry, _):
            agent, token = carry
            agent, updates, metrics = st.learner(agent, links.batches.recv(token))
            token = links.updates.send(jnp.swapaxes(updates, 0, 1), token, p)
            return (agent, links.params.send(agent, token)), metrics

        (agent, token), metrics = jax.lax.scan(body, (agent, token), None, calls)
        return agent, token, metrics

    def actors_replay(env, rep, steps, token):
        def body(carry, _):
            env, rep, steps, token = carry
            words = links.params.recv(token)
            updates = jnp.swapaxes(links.updates.recv(token, p), 0, 1)
            *env, finished, rep, batches = st.actor_replay(words, *env, steps, rep, updates)
            token = links.batches.send(batches, token)
            return (tuple(env), rep, steps + n, token), finished

        (env, rep, _, token), finished = jax.lax.scan(body, (env, rep, steps, token), None, calls)
        return env, rep, token, finished

    return {
        "actors": jax.jit(actors, donate_argnums=0),
        "replay": jax.jit(replay, donate_argnums=0),
        "learner": jax.jit(learner),
        "actors+replay": jax.jit(actors_replay, donate_argnums=(0, 1)),
    }


@dataclasses.dataclass
class _Waits:
    """A stage's seconds blocked on its channels' ends, per chunk (from the channels' totals)."""

    stage: str
    links: Links
    last: float = 0.0

    def take(self) -> float:
        total = 0.0
        for name, end in STAGE_INPUTS[self.stage]:
            s = getattr(self.links, name).stats()
            total += s.recv_wait_s if end == "recv" else s.send_wait_s
        out, self.last = total - self.last, total
        return out


def group_thread(r: StageRun, links: Links, group: str, agent_words: Any) -> dict:
    """Runs ``group``'s chunk programs (``actors``, ``replay``, ``learner`` or
    ``actors+replay``) on the calling thread; after each chunk posts its stages' reports and
    ``("clock:" + group, chunk, {"run_ms", "wait_ms", "calls"})`` (ms per call; ``wait``:
    blocked on a channel).

    Returns its stages' results as `drlhet.runtime.stage_loops.group_loop` does."""
    program = _programs(r, links)[group]
    token = jax.device_put(jnp.int32(0), r.loop.devices[group.split("+")[-1]])
    s = _GroupState(list(r.loop.env), r.loop.rep, agent_words, r.loop.env_steps)
    waits, t = _Waits(group, links), time.perf_counter()
    for i in range(r.tr.chunks):
        if group == "learner":
            s.agent, token, metrics = program(s.agent, token)
            jax.block_until_ready(s.agent)
            m = jax.device_get(metrics)  # [calls, S] each
            per_call = [jax.tree.map(lambda x, c=c: x[c], m) for c in range(r.calls)]
            r.report("learner", i, (s.agent, per_call, time.perf_counter()))
        else:
            if group == "actors":
                env, token, finished = program(tuple(s.env), s.steps, token)
            elif group == "replay":
                s.rep, token = program(s.rep, s.steps, token)
            else:
                env, s.rep, token, finished = program(tuple(s.env), s.rep, s.steps, token)
            s.steps += r.calls * r.env_per_call
            if group != "replay":
                _report_actors(r, s, i, env, finished)
            if group != "actors":
                r.report("replay", i, jnp.copy(s.rep.error))  # the next chunk donates rep
        jax.block_until_ready(token)
        now = time.perf_counter()
        clock = {"run_ms": 1e3 * (now - t) / r.calls, "wait_ms": 1e3 * waits.take() / r.calls}
        r.report("clock:" + group, i, {**clock, "calls": r.calls})
        t = now
    results = {"actors": (tuple(s.env), s.steps), "replay": (s.rep, None), "learner": s.agent}
    return {g: results[g] for g in group.split("+")}


@dataclasses.dataclass
class _GroupState:
    """What one group's thread carries from chunk to chunk."""

    env: list
    rep: Any
    agent: Any
    steps: int


def _report_actors(r: StageRun, s: _GroupState, chunk: int, env, finished) -> None:
    """The actors' chunk report: each call's (return sum, episodes), the evaluation key."""
    s.env = list(env)
    s.env[4], k_eval = split_keys(s.env[4])
    f = jax.device_get(finished)  # [calls, S] each
    rounds = [(f[0][c], f[1][c]) for c in range(r.calls)]
    r.report("actors", chunk, (rounds, r.loop.move("actors", "learner")(k_eval), s.steps))

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
* ``updates``: one message per learner step, seeded with the k pending in the state: replay
  call c applies the updates of learner steps ``cP - k .. cP + P - 1 - k`` (a delay of exactly
  k steps).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.backends.channel import ChannelEnd, NativeChannel
from drlhet.runtime.chunks import split_keys
from drlhet.runtime.compiling import inlined, jit
from drlhet.runtime.stage_loops import StageRun

__all__ = ["Links", "open_links", "group_thread", "in_program_groups", "STAGE_INPUTS"]

STAGE_INPUTS = {
    "actors": (("params", "recv"), ("transitions", "send")),
    "replay": (("transitions", "recv"), ("updates", "recv"), ("batches", "send")),
    "learner": (("batches", "recv"), ("updates", "send"), ("params", "send")),
    "actors+replay": (("params", "recv"), ("updates", "recv"), ("batches", "send")),
    "actors+learner": (
        ("params", "recv"),
        ("transitions", "send"),
        ("batches", "recv"),
        ("updates", "send"),
        ("params", "send"),
    ),
    "replay+learner": (
        ("transitions", "recv"),
        ("updates", "recv"),
        ("batches", "send"),
        ("batches", "recv"),
        ("updates", "send"),
        ("params", "send"),
    ),
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

    def ids_on(self, device: jax.Device) -> dict[str, jax.Array]:
        """The channels' ids on ``device``, by name: a chunk program's argument."""
        return {name: ch.id_on(device) for name, ch in self._asdict().items()}

    def ends(self, ids: dict[str, jax.Array]) -> dict[str, ChannelEnd]:
        """The channels inside a program whose argument ``ids`` came from `ids_on`."""
        return {name: ch.end(ids[name]) for name, ch in self._asdict().items()}


def open_links(r: StageRun, lead: int) -> Links:
    """Opens and seeds the channels of run ``r`` (the replay runs at most ``lead`` calls ahead
    of the learner): two agents for the actors' first calls, the k pending updates."""
    st, loop, cfg = r.st, r.loop, r.tr.config
    pack = jit(jax.vmap(st.agent.pack))
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
    # the k updates the state holds (empty ones at the start of a run)
    words = np.asarray(jit(jax.vmap(jax.vmap(st.entry.pack)))(loop.pending))  # [S, k, We]
    for j in range(cfg.delay):
        links.updates.put(words[:, j])
    return links


def in_program_groups(groups: list[tuple[str, ...]]) -> list[str] | None:
    """The threads of in-program channels for these device groups (one per device), or None
    where a device holds a pairing not built (actors + replay + learner is the fused loop)."""
    names = ["+".join(g) for g in groups]
    return names if set(names) <= set(STAGE_INPUTS) else None


def _steps(r: StageRun, links: Links) -> dict[str, Any]:
    """One stage call each, inside a program: ``(carry, steps) -> (carry, outputs)``; the carry
    holds ``env``, ``rep``, ``agent`` as the stage needs them, the ``token`` and the channels'
    ``ids`` (program arguments: see `drlhet.backends.channel.ChannelEnd`)."""
    st, p = r.st, r.per_call

    def updates(ch, token, got):  # the P updates of the call, one a learner step: [S, P, We]
        return jnp.swapaxes(ch["updates"].recv(after(token, got), p), 0, 1)

    def actors(c, steps):
        ch = links.ends(c["ids"])
        *env, trans, finished = inlined(st.actor)(ch["params"].recv(c["token"]), *c["env"], steps)
        token = ch["transitions"].send(trans, c["token"])
        return {**c, "env": tuple(env), "token": token}, {"finished": finished}

    def replay(c, steps):
        ch = links.ends(c["ids"])
        trans = ch["transitions"].recv(c["token"])
        rep, batches = inlined(st.replay)(c["rep"], trans, updates(ch, c["token"], trans), steps)
        return {**c, "rep": rep, "token": ch["batches"].send(batches, c["token"])}, {}

    def learner(c, steps):
        ch = links.ends(c["ids"])
        agent, ups, metrics = inlined(st.learner)(c["agent"], ch["batches"].recv(c["token"]))
        token = ch["updates"].send(jnp.swapaxes(ups, 0, 1), c["token"], p)
        token = ch["params"].send(agent, token)
        return {**c, "agent": agent, "token": token}, {"metrics": metrics}

    def actors_replay(c, steps):
        ch = links.ends(c["ids"])
        words = ch["params"].recv(c["token"])
        ups = updates(ch, c["token"], words)
        *env, finished, rep, batches = inlined(st.actor_replay)(
            words, *c["env"], steps, c["rep"], ups
        )
        token = ch["batches"].send(batches, c["token"])
        return {**c, "env": tuple(env), "rep": rep, "token": token}, {"finished": finished}

    return {
        "actors": actors,
        "replay": replay,
        "learner": learner,
        "actors+replay": actors_replay,
    }


def after(token: jax.Array, got: Any) -> jax.Array:
    """``token``, but only once ``got`` (what a receive returned) is there: a receive that takes
    it runs after that one. Chained, a program's channel calls run in the order its data flow
    needs, one at a time. Unchained, XLA picks the order of a program's independent calls (it
    ran them one at a time, the last traced first, 2026-11-29): with replay and learner in one
    program, the learner's receive of the batches the replay sends would wait for ever if XLA
    issued it first. (While a waiting call still blocked its thread, two unchained receives
    also held both threads of XLA's pool on 2 cores: a resumed run hung so.)"""
    token, _ = jax.lax.optimization_barrier((token, got))
    return token


def skewed(r: StageRun, group: str) -> bool:
    """Whether ``group``'s first stage runs one call ahead of the learner in its program, so
    that the other device overlaps them: actors + learner always; replay + learner where replay
    call c + 1 needs no update of learner call c (lead ``floor(k / P) >= 2``)."""
    if group == "actors+learner":
        return True
    return group == "replay+learner" and r.tr.config.delay // r.per_call >= 2


def chunk_program(r: StageRun, links: Links, group: str, first: bool, last: bool):
    """``group``'s program for one chunk: ``(donated, kept, steps) -> (donated, kept,
    outputs)`` (carry dicts: ``env`` and ``rep`` donated, ``agent``, ``token`` and the
    channels' ``ids`` kept; the ids are arguments, so the program serves any run), its
    stages' calls of the chunk in order (``first``, ``last``: the run's first or last chunk, which
    start or end the skew of a `skewed` group). Outputs stack over calls: ``finished``
    (actors; a skewed chunk has one more or one less than ``calls``), ``metrics``
    (learner), ``k_eval`` (actors: the evaluation key, split off after the chunk's last
    actors call as the host-driven loops do)."""
    step, calls, n = _steps(r, links), r.calls, r.env_per_call
    stages = [step[s] for s in (group.split("+") if group not in step else [group])]

    def seq(c, steps, fns):  # stage calls one after the other; the outputs merged
        outs: dict = {}
        for fn, at in fns:
            c, o = fn(c, steps + at)
            outs.update(o)
        return c, outs

    def split(c):
        env = list(c["env"])
        env[4], k_eval = inlined(split_keys)(env[4])
        return {**c, "env": tuple(env)}, k_eval

    def run(c, steps):
        if not skewed(r, group):  # every stage's call c in turn
            body = lambda c, i: seq(c, steps + i * n, [(f, 0) for f in stages])  # noqa: E731
            c, outs = jax.lax.scan(body, c, jnp.arange(calls))
            if "env" in c:
                c, outs["k_eval"] = split(c)
            return c, outs
        ahead, learner = stages
        pre: list[dict] = []
        if first:  # the run's first call of the stage ahead
            c, o = ahead(c, steps)
            pre.append(o)
        # then call c + 1 of the stage ahead beside learner call c
        body = lambda c, i: seq(c, steps + i * n, [(ahead, n), (learner, 0)])  # noqa: E731
        c, outs = jax.lax.scan(body, c, jnp.arange(calls - 1))
        post: list[dict] = []
        if "env" in c:
            c, k_eval = split(c)
        fns = [(learner, 0)] if last else [(ahead, n), (learner, 0)]
        c, o = seq(c, steps + (calls - 1) * n, fns)
        post.append(o)
        outs = _stack(pre, outs, post)
        if "env" in c:
            outs["k_eval"] = k_eval
        return c, outs

    def program(donated, kept, steps):  # the env and the buffer are donated, not the agent
        c, outs = run({**donated, **kept}, steps)
        return {k: c[k] for k in donated}, {k: c[k] for k in kept}, outs

    return jit(program, donate_argnums=0)


def _stack(pre: list[dict], outs: dict, post: list[dict]) -> dict:
    """Concatenates single calls' outputs before and after a scan's stacked ones."""

    def cat(key):
        parts = [jax.tree.map(lambda x: x[None], o[key]) for o in pre if key in o]
        parts.append(outs[key]) if key in outs else None
        parts += [jax.tree.map(lambda x: x[None], o[key]) for o in post if key in o]
        return jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)

    keys = {k for o in (*pre, outs, *post) for k in o}
    return {k: cat(k) for k in keys}


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
    """Runs ``group``'s chunk programs (the stages of one device, e.g. ``actors+replay``) on
    the calling thread; after each chunk posts its stages' reports and ``("clock:" + group,
    chunk, {"run_ms", "wait_ms", "calls"})`` (ms per call; ``wait``: blocked on a channel).

    Returns its stages' results as `drlhet.runtime.stage_loops.group_loop` does."""
    stages, chunks, loop = group.split("+"), r.tr.chunks, r.loop
    device = loop.devices[stages[-1]]
    c: dict[str, Any] = {"token": jax.device_put(jnp.int32(0), device), "ids": links.ids_on(device)}
    c.update({"env": tuple(loop.env)} if "actors" in stages else {})
    c.update({"rep": loop.rep} if "replay" in stages else {})
    c.update({"agent": agent_words} if "learner" in stages else {})
    donated = {k: c.pop(k) for k in ("env", "rep") if k in c}
    # compiled before the run (the last chunk's must not compile while timed); a skewed
    # group's first and last chunks start and end its skew

    def variant(i: int, n: int) -> tuple[bool, bool] | None:
        return (i == 0, i == n - 1) if skewed(r, group) else None

    programs = {
        v: chunk_program(r, links, group, *(v or (False, False)))
        .lower(donated, c, loop.env_steps)
        .compile()
        for v in {variant(i, chunks) for i in range(chunks)}
    }
    steps, finished = loop.env_steps, []
    waits, t = _Waits(group, links), time.perf_counter()
    i = 0
    # a stop may end the run early; with margin 2 (`ChunkEnd`) its last chunk is >= 1, so
    # its program is one of these
    while i < (n := r.end.enter(i)):
        donated, c, outs = programs[variant(i, n)](donated, c, steps)
        steps += r.calls * r.env_per_call
        if "actors" in stages:
            f = jax.device_get(outs["finished"])  # [m, S] each: per call (return sum, episodes)
            finished += [(f[0][j], f[1][j]) for j in range(len(f[0]))]
            to_l = loop.move("actors", "learner")
            r.report("actors", i, (finished[: r.calls], to_l(outs["k_eval"]), steps))
            finished = finished[r.calls :]  # a skewed program's call of the next chunk
        if "replay" in stages:
            r.report("replay", i, jnp.copy(donated["rep"].error))  # the next chunk donates rep
        if "learner" in stages:
            jax.block_until_ready(c["agent"])
            m = jax.device_get(outs["metrics"])  # [calls, S] each
            per_call = [jax.tree.map(lambda x, j=j: x[j], m) for j in range(r.calls)]
            r.report("learner", i, (c["agent"], per_call, time.perf_counter()))
        jax.block_until_ready(c["token"])
        now = time.perf_counter()
        clock = {"run_ms": 1e3 * (now - t) / r.calls, "wait_ms": 1e3 * waits.take() / r.calls}
        r.report("clock:" + group, i, {**clock, "calls": r.calls})
        t, i = now, i + 1
    results: dict[str, Any] = {
        "actors": (donated.get("env"), steps),
        "replay": (donated.get("rep"), None),
        "learner": c.get("agent"),
    }
    return {g: results[g] for g in stages}

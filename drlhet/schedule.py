"""The scheduler: place each primitive on a backend and a device, and compose the training step.

A `Mapping` assigns each primitive of the loop (DESIGN section 1) a ``backend@device``. Three
groups must stay together: the actors (``act``, ``env_step``), the replay buffer (``insert``,
``sample``, ``update``: the buffer lives in one place) and the learner (``train``). Consecutive
primitives on one device form a segment (`segments`). A one-segment mapping runs as the fused
``lax.scan`` of `drlhet.train`; otherwise `run` drives jitted stages from a host loop with
explicit ``device_put`` between them and JAX's asynchronous dispatch, keeping up to ``delay``
priority updates in flight (Zhang, Meng, Prasanna, TPDS 2023, Sec. 5): with ``delay >= 1`` the
replay stage samples batch t+1 while the learner still trains on batch t, and the actors act
with the parameters of one iteration earlier. With ``delay = 0`` both paths compute the same
numbers for the same seed.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.backends import BackendUnavailable, lookup
from drlhet.replay.delayed import after_sample
from drlhet.train import TrainConfig, chunk_row, make_trainer

__all__ = [
    "Mapping",
    "Placement",
    "HostStages",
    "host_stages",
    "segments",
    "resolve_device",
    "run",
    "LOOP_ORDER",
]

LOOP_ORDER = ("act", "env_step", "insert", "sample", "train", "update")
GROUPS = {
    "actors": ("act", "env_step"),
    "replay": ("insert", "sample", "update"),
    "learner": ("train",),
}


@dataclasses.dataclass(frozen=True)
class Placement:
    backend: str
    device: str


@dataclasses.dataclass(frozen=True)
class Mapping:
    """Where each primitive runs, as ``backend@device`` (e.g. ``native@cpu:1``).

    ``Mapping.parse("actors=cpu:0,replay=native@cpu:1,learner=cpu:1")`` sets whole groups;
    per-primitive keys (``sample=...``) are accepted too. A bare device means backend ``jax``.
    """

    act: str = "jax@cpu:0"
    env_step: str = "jax@cpu:0"
    insert: str = "jax@cpu:0"
    sample: str = "jax@cpu:0"
    train: str = "jax@cpu:0"
    update: str = "jax@cpu:0"

    @classmethod
    def parse(cls, text: str) -> Mapping:
        """Parses ``key=backend@device`` pairs separated by commas (keys: groups or primitives)."""
        values: dict[str, str] = {}
        for item in filter(None, (t.strip() for t in text.split(","))):
            if "=" not in item:
                raise ValueError(f"mapping item {item!r} is not key=backend@device")
            key, value = (x.strip() for x in item.split("=", 1))
            value = value if "@" in value else f"jax@{value}"
            names = GROUPS.get(key, (key,))
            for name in names:
                if name not in LOOP_ORDER:
                    raise ValueError(
                        f"unknown primitive or group {key!r}; "
                        f"use {sorted(GROUPS) + list(LOOP_ORDER)}"
                    )
                values[name] = value
        return cls(**values)

    def placements(self) -> dict[str, Placement]:
        out = {}
        for name in LOOP_ORDER:
            text = getattr(self, name)
            if text.count("@") != 1:
                raise ValueError(f"{name}={text!r}: expected backend@device, e.g. jax@cpu:0")
            backend, device = text.split("@")
            out[name] = Placement(backend, device)
        return out

    def __str__(self) -> str:
        return ",".join(f"{n}={getattr(self, n)}" for n in LOOP_ORDER)


def resolve_device(name: str) -> jax.Device:
    """``"cpu:1"`` -> the second CPU device; a clear error when it is absent."""
    platform, _, index = name.partition(":")
    try:
        devices = jax.devices(platform)
    except RuntimeError as e:
        raise BackendUnavailable(f"device {name!r}: no {platform!r} devices here ({e})") from e
    i = int(index or 0)
    if i >= len(devices):
        hint = (
            " (set jax.config.update('jax_num_cpu_devices', N) before JAX is first used, or pass "
            "--cpu-devices N to drlhet train)"
            if platform == "cpu"
            else ""
        )
        raise BackendUnavailable(
            f"device {name!r} is not present: this process has {len(devices)} {platform} "
            f"device(s){hint}"
        )
    return devices[i]


def validate(mapping: Mapping) -> dict[str, Placement]:
    """Checks a mapping up front; returns its placements.

    Raises:
      ValueError: an impossible pairing (a group split across devices, a primitive on a
        backend that does not implement it).
      BackendUnavailable: an absent device or backend.
    """
    places = mapping.placements()
    for group, names in GROUPS.items():
        got = {(places[n].backend, places[n].device) for n in names}
        if len(got) > 1:
            raise ValueError(
                f"the {group} ({', '.join(names)}) must share one backend@device, got {sorted(got)}"
            )
    for name in ("act", "env_step", "train"):
        if places[name].backend != "jax":
            raise ValueError(f"{name} runs on backend 'jax' only, got {places[name].backend!r}")
    for p in places.values():
        dev = resolve_device(p.device)
        if p.backend == "native" and dev.platform != "cpu":
            raise ValueError(f"backend 'native' runs on a CPU device, not {p.device!r}")
    rb = places["sample"].backend
    lookup("find", rb)  # BackendUnavailable names what is missing
    return places


def segments(mapping: Mapping) -> list[tuple[str, tuple[str, ...]]]:
    """Consecutive primitives (in loop order) on one device: ``[(device, (primitive, ...))]``."""
    places = validate(mapping)
    out: list[tuple[str, list[str]]] = []
    for name in LOOP_ORDER:
        dev = places[name].device
        if out and out[-1][0] == dev:
            out[-1][1].append(name)
        else:
            out.append((dev, [name]))
    if len(out) > 1 and out[0][0] == out[-1][0] and len({d for d, _ in out}) == 1:
        out = [(out[0][0], [n for _, ns in out for n in ns])]
    return [(d, tuple(ns)) for d, ns in out]


def run(
    cfg: TrainConfig,
    mapping: Mapping,
    on_chunk: Callable[[dict], None] | None = None,
) -> tuple[dict, list[dict]]:
    """Trains ``cfg`` with its primitives placed by ``mapping``.

    Returns:
      ``(state, rows)``: the final state (``agent``, ``replay`` and the rest, as arrays on their
      devices) and one row per chunk as `drlhet.train.train` returns them, plus ``mapping`` and
      ``segments``.
    """
    places = validate(mapping)
    cfg = dataclasses.replace(cfg, backend=places["sample"].backend)
    segs = segments(mapping)
    devices = {g: resolve_device(places[names[0]].device) for g, names in GROUPS.items()}
    tr = make_trainer(cfg)
    keys = jax.random.split(jax.random.key(cfg.seed), cfg.seeds)
    t0 = time.perf_counter()
    with jax.default_device(devices["replay"]):
        states = jax.jit(jax.vmap(tr.init))(keys)
        states = jax.jit(jax.vmap(tr.warmup), donate_argnums=0)(states)
    if len(segs) == 1:
        return _run_fused(cfg, tr, states, devices["replay"], on_chunk, t0, mapping, segs)
    if cfg.delay >= 2 * cfg.sgd_steps:
        return _run_pipelined(cfg, tr, states, devices, on_chunk, t0, mapping, segs)
    return _run_host_loop(cfg, tr, states, devices, on_chunk, t0, mapping, segs)


def _row(cfg, tr, summary, i, t0, last, mapping, segs) -> dict:
    row = chunk_row(cfg, tr, summary, i, t0, last)
    row.update(mapping=str(mapping), segments=[[d, list(n)] for d, n in segs], delay=cfg.delay)
    return row


def _run_fused(cfg, tr, states, device, on_chunk, t0, mapping, segs):
    states = jax.device_put(states, device)
    chunk = jax.jit(jax.vmap(tr.chunk), donate_argnums=0)
    rows, last = [], time.perf_counter()
    for i in range(tr.chunks):
        states, summary = chunk(states)
        summary = jax.device_get(summary)
        if np.any(summary["replay_error"]):
            raise ValueError(f"replay refused an operation (flags {summary['replay_error']})")
        rows.append(_row(cfg, tr, summary, i, t0, last, mapping, segs))
        last = time.perf_counter()
        if on_chunk:
            on_chunk(rows[-1])
    return states._asdict(), rows


class HostStages(NamedTuple):
    """The jitted stages the per-iteration host loop dispatches (all vmapped over seeds).

    Attributes:
      actor_step: ``(actor_agent, env_state, obs, fifo, ret, key, env_steps) -> (env_state, obs,
        fifo, ret, key, transitions [S, N, ...], finished, learn_keys)``, ``learn_keys`` a
        tuple of ``sgd_steps`` keys ``[S]``
        (act + env_step).
      replay_in: ``(replay, transitions, key [S], env_steps) -> (replay, batch, update_key)``
        (insert + the first sample).
      replay_next: ``(replay, indices [S, B], stamps [S, B], priorities [S, B], key, env_steps)
        -> (replay, batch, update_key)`` (update + the next sample).
      replay_apply: ``(replay, indices, stamps, priorities) -> replay`` (update).
      learner: ``(agent, data, weights [S, B], key [S]) -> (agent, priorities [S, B], metrics)``
        (train; donates ``agent`` only when ``delay == 0``).
      evaluate: ``(agent, key [S]) -> mean greedy return [S]``.
    """

    actor_step: Callable[..., Any]
    replay_in: Callable[..., Any]
    replay_next: Callable[..., Any]
    replay_apply: Callable[..., Any]
    learner: Callable[..., Any]
    evaluate: Callable[..., Any]


def host_stages(cfg: TrainConfig, tr: Any) -> HostStages:
    """Builds the host loop's jitted stages for ``cfg`` (also profiled by `drlhet.dse`)."""
    p = tr.parts
    vm = jax.vmap

    def actor_fn(actor_agent, env_state, obs, fifo, ret, key, env_steps):
        key, k_act, k_env, k_learn = jax.random.split(key, 4)
        actions = p.act(actor_agent, obs, k_act, env_steps)
        env_state, obs, fifo, ret, transitions, finished = p.env_step(
            env_state, obs, fifo, ret, actions, k_env
        )
        learn_keys = jax.random.split(k_learn, cfg.sgd_steps)
        # one key per SGD step as separate outputs: slicing on the host costs a dispatch each
        return env_state, obs, fifo, ret, key, transitions, finished, tuple(learn_keys)

    replay_fns = tr.replay

    def apply_fn(rep, indices, stamps, priorities):
        return replay_fns.update_priorities(rep, indices, priorities, stamps)

    def replay_in_fn(rep, transitions, k, env_steps):
        rep = p.insert(rep, transitions)
        k_sample, k_update = jax.random.split(k)
        return rep, p.sample(rep, k_sample, env_steps), k_update

    def replay_next_fn(rep, indices, stamps, priorities, k, env_steps):
        rep = apply_fn(rep, indices, stamps, priorities)
        k_sample, k_update = jax.random.split(k)
        return rep, p.sample(rep, k_sample, env_steps), k_update

    def learner_fn(agent_state, data, weights, k):
        return p.train(agent_state, _Batch(data, weights), k)

    return HostStages(
        actor_step=jax.jit(vm(actor_fn, in_axes=(0, 0, 0, 0, 0, 0, None)), donate_argnums=(1, 3)),
        replay_in=jax.jit(vm(replay_in_fn, in_axes=(0, 0, 0, None)), donate_argnums=0),
        replay_next=jax.jit(vm(replay_next_fn, in_axes=(0, 0, 0, 0, 0, None)), donate_argnums=0),
        replay_apply=jax.jit(vm(apply_fn), donate_argnums=0),
        # with delay >= 1 the actors keep the learner's previous parameters: not donated
        learner=jax.jit(vm(learner_fn), donate_argnums=() if cfg.delay else 0),
        evaluate=jax.jit(vm(p.evaluate)),
    )


def _run_host_loop(cfg, tr, states, devices, on_chunk, t0, mapping, segs):
    """Jitted stages on their devices, driven from Python; see the module docstring."""
    put = jax.device_put
    da, dr, dl = devices["actors"], devices["replay"], devices["learner"]
    to_r, to_l, to_a = _mover(da, dr), _mover(dr, dl), _mover(dl, da)
    l_to_r = _mover(dl, dr)
    st = host_stages(cfg, tr)
    actor_step, replay_in, replay_next = st.actor_step, st.replay_in, st.replay_next
    replay_apply, learner, evaluate = st.replay_apply, st.learner, st.evaluate
    k_delay = cfg.delay

    # Place the state: actors' pieces on da, replay on dr, learner on dl.
    s = states
    agent = put(s.agent, dl)
    actor_agent = put(s.agent if k_delay == 0 else s.actor_agent, da)
    env_state, obs, fifo, ret, key = put((s.env_state, s.obs, s.fifo, s.episode_return, s.key), da)
    rep = put(s.replay, dr)
    # The update to apply before the next sample: the current one (delay 0) or, with delay k,
    # the oldest of the k + 1 newest, kept here on the host so that the replay stage never waits
    # for the learner's current step. An empty entry (stamp -1) matches no slot: dropped.
    shape = (cfg.seeds, cfg.batch_size)
    empty = put(
        (jnp.zeros(shape, jnp.int32), jnp.full(shape, -1, jnp.int32), jnp.ones(shape, jnp.float32)),
        dr,
    )
    queue: collections.deque = collections.deque()
    env_steps = int(np.asarray(s.env_steps)[0])
    rows, last = [], time.perf_counter()
    for i in range(tr.chunks):
        metrics_acc, finished_acc = [], []
        for _ in range(tr.iterations):
            env_state, obs, fifo, ret, key, transitions, finished, learn_keys = actor_step(
                actor_agent, env_state, obs, fifo, ret, key, env_steps
            )
            finished_acc.append(finished)
            transitions, learn_keys = to_r((transitions, learn_keys))
            before = agent  # delay >= 1: the actors' next parameters
            to_apply = empty
            for j in range(cfg.sgd_steps):
                kj = learn_keys[j]
                if j == 0:
                    rep, batch, k_update = replay_in(rep, transitions, kj, env_steps)
                else:
                    rep, batch, k_update = replay_next(rep, *to_apply, kj, env_steps)
                agent, prio, metrics = learner(agent, *to_l((batch.data, batch.weights, k_update)))
                metrics_acc.append(metrics)
                entry = (batch.indices, batch.stamps, prio)
                if k_delay == 0:
                    to_apply = entry
                else:
                    queue.append(entry)
                    to_apply = queue.popleft() if len(queue) > k_delay else empty
                to_apply = l_to_r(to_apply)
            rep = replay_apply(rep, *to_apply)
            actor_agent = to_a(agent if k_delay == 0 else before)
            env_steps += cfg.num_envs
        key, k_eval = _split_keys(key)
        summary = _chunk_summary(
            cfg, metrics_acc, finished_acc, evaluate(agent, put(k_eval, dl)), rep, env_steps
        )
        rows.append(_row(cfg, tr, summary, i, t0, last, mapping, segs))
        last = time.perf_counter()
        if on_chunk:
            on_chunk(rows[-1])
    state = {"agent": agent, "replay": rep, "env_state": env_state, "obs": obs, "key": key}
    return state, rows


def _run_pipelined(cfg, tr, states, devices, on_chunk, t0, mapping, segs):
    """The host loop for delay k >= 2 x sgd_steps: each stage runs U = k // (2 sgd_steps)
    iterations per call, so that replay stage c + 1 needs only the priorities of learner stage
    c - 1 (k learner steps back) and runs while learner stage c trains; the actors act with the
    parameters of learner stage c - 1. Same priority-update semantics as `delayed`."""
    p = tr.parts
    vm = jax.vmap
    put = jax.device_put
    da, dr, dl = devices["actors"], devices["replay"], devices["learner"]
    to_r, to_l, to_a, l_to_r = _mover(da, dr), _mover(dr, dl), _mover(dl, da), _mover(dl, dr)
    n_sgd = cfg.sgd_steps
    unroll = max(1, cfg.delay // (2 * n_sgd))
    while tr.iterations % unroll:
        unroll -= 1
    steps_per_stage = unroll * n_sgd  # learner steps per stage call

    def actor_fn(actor_agent, env_state, obs, fifo, ret, key, env_steps):
        def body(carry, i):
            env_state, obs, fifo, ret, key = carry
            key, k_act, k_env, k_learn = jax.random.split(key, 4)
            actions = p.act(actor_agent, obs, k_act, env_steps + i * cfg.num_envs)
            env_state, obs, fifo, ret, transitions, finished = p.env_step(
                env_state, obs, fifo, ret, actions, k_env
            )
            return (env_state, obs, fifo, ret, key), (
                transitions,
                finished,
                jax.random.split(k_learn, n_sgd),
            )

        (env_state, obs, fifo, ret, key), (transitions, finished, learn_keys) = jax.lax.scan(
            body, (env_state, obs, fifo, ret, key), jnp.arange(unroll)
        )
        return env_state, obs, fifo, ret, key, transitions, finished, learn_keys

    def replay_fn(rep, transitions, learn_keys, to_apply, env_steps):
        # to_apply: [steps_per_stage, B] updates, the one to apply after each sample
        def body(rep, u):
            rep = p.insert(rep, jax.tree.map(lambda x: x[u], transitions))
            outs = []
            for j in range(n_sgd):
                k_sample, k_update = jax.random.split(learn_keys[u, j])
                batch = p.sample(rep, k_sample, env_steps + u * cfg.num_envs)
                idx, stamps, prio = (x[u * n_sgd + j] for x in to_apply)
                stamps = after_sample(stamps, batch.indices)  # else XLA copies the tree
                rep = tr.replay.update_priorities(rep, idx, prio, stamps)
                outs.append((batch, k_update))
            return rep, jax.tree.map(lambda *x: jnp.stack(x), *outs)

        rep, (batches, k_updates) = jax.lax.scan(body, rep, jnp.arange(unroll))
        flat = jax.tree.map(lambda x: x.reshape((steps_per_stage,) + x.shape[2:]), batches)
        return rep, flat, k_updates.reshape((steps_per_stage,))

    def learner_fn(agent_state, batches, k_updates):
        def body(agent_state, xs):
            batch, k = xs
            agent_state, prio, metrics = p.train(agent_state, batch, k)
            return agent_state, ((batch.indices, batch.stamps, prio), metrics)

        agent_state, (entries, metrics) = jax.lax.scan(body, agent_state, (batches, k_updates))
        return agent_state, entries, jax.tree.map(jnp.mean, metrics)

    actor_stage = jax.jit(vm(actor_fn, in_axes=(0, 0, 0, 0, 0, 0, None)), donate_argnums=(1, 3))
    replay_stage = jax.jit(vm(replay_fn, in_axes=(0, 0, 0, 0, None)), donate_argnums=0)
    learner_stage = jax.jit(vm(learner_fn))  # not donated: the actors keep the previous params
    evaluate = jax.jit(vm(p.evaluate))

    s = states
    agent = put(s.agent, dl)
    actor_agent = put(s.actor_agent, da)
    env_state, obs, fifo, ret, key = put((s.env_state, s.obs, s.fifo, s.episode_return, s.key), da)
    rep = put(s.replay, dr)
    # the k newest updates, oldest first; the first k taken are empty (stamp -1: dropped)
    fifo_q = UpdateFifo(put(UpdateFifo.empty(cfg.seeds, cfg.delay, cfg.batch_size), dr))

    env_steps = int(np.asarray(s.env_steps)[0])
    rows, last = [], time.perf_counter()
    for i in range(tr.chunks):
        metrics_acc, finished_acc = [], []
        for _ in range(tr.iterations // unroll):
            env_state, obs, fifo, ret, key, transitions, finished, learn_keys = actor_stage(
                actor_agent, env_state, obs, fifo, ret, key, env_steps
            )
            finished_acc.append(finished)
            to_apply = fifo_q.take(steps_per_stage)
            rep, batches, k_updates = replay_stage(
                rep, *to_r((transitions, learn_keys)), to_apply, env_steps
            )
            previous = agent
            agent, entries, metrics = learner_stage(agent, *to_l((batches, k_updates)))
            metrics_acc.append(metrics)
            fifo_q.push(l_to_r(entries))
            actor_agent = to_a(previous)
            env_steps += unroll * cfg.num_envs
        key, k_eval = _split_keys(key)
        # finished counts come per iteration of a stage call: sum them over the call first
        finished_acc = [jax.tree.map(lambda x: x.sum(axis=1), f) for f in finished_acc]
        summary = _chunk_summary(
            cfg, metrics_acc, finished_acc, evaluate(agent, put(k_eval, dl)), rep, env_steps
        )
        row = _row(cfg, tr, summary, i, t0, last, mapping, segs)
        row["iterations_per_stage_call"] = unroll
        rows.append(row)
        last = time.perf_counter()
        if on_chunk:
            on_chunk(rows[-1])
    state = {"agent": agent, "replay": rep, "env_state": env_state, "obs": obs, "key": key}
    return state, rows


class UpdateFifo:
    """The pipelined host loop's queue of priority updates, kept on the host as a deque of
    ``(indices, stamps, priorities)`` arrays ``[seeds, n, B]`` (n learner steps each, oldest
    first), so that taking the oldest ones never waits for the learner stage in flight.

    Made with ``k`` empty entries (stamp -1: `drlhet.replay.delayed` drops them), then pushed
    one learner stage's ``S`` entries at a time while each replay stage takes ``S``: the j-th
    update taken is the one learner step j - k produced (a delay of exactly k learner steps,
    paper Sec. 5)."""

    def __init__(self, first: tuple[jax.Array, jax.Array, jax.Array]):
        self._q: collections.deque = collections.deque([first])

    @staticmethod
    def empty(seeds: int, n: int, batch: int) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``n`` empty entries: indices 0, stamps -1, priorities 1; each ``[seeds, n, batch]``."""
        shape = (seeds, n, batch)
        return jnp.zeros(shape, jnp.int32), jnp.full(shape, -1, jnp.int32), jnp.ones(shape)

    def __len__(self) -> int:
        return sum(int(head[0].shape[1]) for head in self._q)

    def push(self, entries: tuple[jax.Array, jax.Array, jax.Array]) -> None:
        """Appends the newest entries (``[seeds, n, B]`` each)."""
        self._q.append(entries)

    def take(self, n: int) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Removes and returns the ``n`` oldest entries (``[seeds, n, B]`` each)."""
        if n > len(self):
            raise ValueError(f"the update queue holds {len(self)} entries; {n} were asked for")
        parts = []
        while n:
            head = self._q[0]
            m = int(head[0].shape[1])
            if m <= n:
                parts.append(self._q.popleft())
                n -= m
            else:
                parts.append(tuple(x[:, :n] for x in head))
                self._q[0] = tuple(x[:, n:] for x in head)
                n = 0
        if len(parts) == 1:
            return parts[0]
        idx, stamps, prio = (jnp.concatenate(xs, axis=1) for xs in zip(*parts, strict=True))
        return idx, stamps, prio


def _chunk_summary(cfg, metrics_acc, finished_acc, eval_return, rep, env_steps) -> dict:
    """A chunk's per-seed summary from the host loop's accumulated per-step outputs."""
    metrics = jax.tree.map(lambda *x: jnp.mean(jnp.stack(x), axis=0), *metrics_acc)
    ret_sum = sum(np.asarray(f[0]) for f in finished_acc)
    n_done = sum(np.asarray(f[1]) for f in finished_acc)
    summary = dict(jax.device_get(metrics))
    summary["eval_return"] = jax.device_get(eval_return)
    summary["train_return"] = ret_sum / np.maximum(n_done, 1)
    summary["env_steps"] = np.full((cfg.seeds,), env_steps)
    err = np.asarray(rep.error)
    if np.any(err):
        raise ValueError(f"replay refused an operation (flags {err})")
    return summary


def _mover(src: jax.Device, dst: jax.Device) -> Callable[[Any], Any]:
    """``device_put`` to ``dst``, or nothing when ``src`` is ``dst`` (it costs ~10 us a leaf)."""
    if src == dst:
        return lambda x: x
    return lambda x: jax.device_put(x, dst)


@jax.jit
def _split_keys(key):
    pair = jax.vmap(jax.random.split)(key)
    return pair[:, 0], pair[:, 1]


class _Batch:
    """The fields of a sampled batch the learner needs (data and IS weights)."""

    def __init__(self, data: Any, weights: jax.Array):
        self.data = data
        self.weights = weights
